package main

import "github.com/holdfast-backup/holdfast/setting"

// Every message of holdfast, whichever package makes it (a refusal, a run's reason, a note on
// the dashboard), names a setting by its path (package setting), and shows it as its flag here.
func init() { setting.Use(settingFlag) }

// settingFlag names the setting at path as the operator gives it: by its flag, which a
// configuration file takes as a key too. A path with no flag is itself.
func settingFlag(path string) string {
	if flag, ok := settingFlags[path]; ok {
		return "--" + flag
	}
	return path
}

// namedSetting is a setting's path (package setting), a command that takes it and its flag there.
type namedSetting struct{ path, command, flag string }

// namedSettings are the settings a message may name: a job's (jobSettings), a notification
// target's (targetSettings), the daemon's (daemonFlags), and the options of single commands
// (optionFlags).
func namedSettings() []namedSetting {
	var all []namedSetting
	for _, s := range jobSettings {
		all = append(all, namedSetting{s.path, "job add", s.flag})
	}
	for _, s := range targetSettings {
		all = append(all, namedSetting{s.path, "notify add", s.flag})
	}
	for path, flag := range daemonFlags {
		all = append(all, namedSetting{path, "daemon", flag})
	}
	return append(all, optionFlags...)
}

// settingFlags is the flag of each setting of namedSettings, by its path.
var settingFlags = func() map[string]string {
	flags := make(map[string]string)
	for _, s := range namedSettings() {
		flags[s.path] = s.flag
	}
	return flags
}()

// optionFlags are the options a message names that are no setting of a job, a target or the
// daemon, each with its path (what it sets, or the command and the option) and a command that
// takes it.
var optionFlags = []namedSetting{
	// A retention policy's change and guardrail, as job add/edit and retention plan/apply take
	// them (a job's stored policy is jobSettings').
	{"Change.Preset", "job add", "preset"}, {"Change.KeepWithin", "job add", "keep-within"},
	{"Guardrail.MaxDeleteShare", "job add", "retention-max-delete"}, {"Guardrail.MinKeep", "job add", "retention-min-keep"},
	{"RetentionApply.Force", "retention apply", "force"},
	// A run's request.
	{"Restore.Target", "restore", "target"}, {"Restore.Overwrite", "restore", "overwrite"},
	{"Restore.ToOriginal", "restore", "to-original"}, {"Restore.Includes", "restore", "include"},
	{"Verify.DrillFiles", "run start", "drill"}, {"Verify.ReadDataSubset", "run start", "read-data-subset"},
	// The restic a command runs (the daemon's is Reconcile.ResticBinary).
	{"Restic", "restore", "restic"},
	// An account, as account add takes it (and a configuration file's account).
	{"Account.GrantedBytes", "account add", "quota"}, {"Account.AllowanceBytes", "account add", "allowance"},
	{"Account.AllowancePeriod", "account add", "period"},
	// holdfast setup: the address of its database is the global --dsn.
	{"Setup.DSN", "setup", "dsn"}, {"Setup.DSNFile", "setup", "dsn-file"}, {"Setup.RotatePassword", "setup", "rotate-password"},
	{"Setup.Role", "setup", "role"}, {"Setup.Database", "setup", "database"},
	// Options of one command.
	{"JobEdit.AnyHost", "job edit", "any-host"}, {"RunList.Job", "run list", "job"},
	{"SnapshotList.Refresh", "snapshot list", "refresh"},
	{"LedgerSettle.Bytes", "ledger settle", "bytes"}, {"LedgerSettle.Why", "ledger settle", "why"},
}
