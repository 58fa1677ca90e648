package main

import (
	"cmp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/holdfast-backup/holdfast/jobdef"
	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/notify"
	"github.com/holdfast-backup/holdfast/retention"
	"github.com/holdfast-backup/holdfast/store"
)

// jobSetting is one setting of a job as `job add` takes it: its flag, its path (package setting:
// the field it sets, which messages name it by), its value as that flag takes it (render), and
// how it is copied from one job to another (copy). Configuration files are compared, applied and
// exported through this table, so a setting the table knows round-trips: apply(export(j)) leaves
// j as it is.
type jobSetting struct {
	flag   string
	path   string
	kind   string // "str", "int", "bool" or "list": how export writes it
	render func(model.Job) []string
	copy   func(dst *model.Job, src model.Job)
}

func str(s string) []string { return []string{s} }

func durationValue(d time.Duration) []string { return str(d.String()) }

// policyOf is a job's retention policy, zero if it has none (or one that cannot be read).
func policyOf(j model.Job) retention.Policy {
	p, _, _ := jobdef.Policy(j)
	return p
}

func keepValue(n int) []string {
	return str(strconv.Itoa(n))
}

func copyRetention(dst *model.Job, src model.Job) {
	dst.Retention.Policy = slices.Clone(src.Retention.Policy)
}

// jobSettings are every setting of a job an operator gives, in the order export writes them.
var jobSettings = []jobSetting{
	{"engine", "Job.Engine", "str", func(j model.Job) []string { return str(j.Engine) }, func(d *model.Job, s model.Job) { d.Engine = s.Engine }},
	{"repo", "Job.Repository", "str", func(j model.Job) []string { return str(j.Repository) }, func(d *model.Job, s model.Job) { d.Repository = s.Repository }},
	{"password-file", "Job.PasswordFile", "str", func(j model.Job) []string { return str(j.PasswordFile) }, func(d *model.Job, s model.Job) { d.PasswordFile = s.PasswordFile }},
	{"env-file", "Job.EnvFile", "str", func(j model.Job) []string { return str(j.EnvFile) }, func(d *model.Job, s model.Job) { d.EnvFile = s.EnvFile }},
	{"path", "Job.Paths", "list", func(j model.Job) []string { return j.Paths }, func(d *model.Job, s model.Job) { d.Paths = slices.Clone(s.Paths) }},
	{"exclude", "Job.Excludes", "list", func(j model.Job) []string { return j.Excludes }, func(d *model.Job, s model.Job) { d.Excludes = slices.Clone(s.Excludes) }},
	{"command", "Job.Command", "list", func(j model.Job) []string { return j.Command }, func(d *model.Job, s model.Job) { d.Command = slices.Clone(s.Command) }},
	{"user", "Job.User", "str", func(j model.Job) []string { return str(j.User) }, func(d *model.Job, s model.Job) { d.User = s.User }},
	{"group", "Job.Group", "str", func(j model.Job) []string { return str(j.Group) }, func(d *model.Job, s model.Job) { d.Group = s.Group }},
	{"host", "Job.Host", "str", func(j model.Job) []string { return str(j.Host) }, func(d *model.Job, s model.Job) { d.Host = s.Host }},
	{"nice", "Job.Nice", "int", func(j model.Job) []string {
		if j.Nice == nil {
			return nil
		}
		return str(strconv.Itoa(*j.Nice))
	}, func(d *model.Job, s model.Job) {
		d.Nice = nil
		if s.Nice != nil {
			n := *s.Nice
			d.Nice = &n
		}
	}},
	{"io-class", "Job.IOSchedulingClass", "str", func(j model.Job) []string { return str(j.IOSchedulingClass) }, func(d *model.Job, s model.Job) { d.IOSchedulingClass = s.IOSchedulingClass }},
	{"runtime-max", "Job.RuntimeMax", "str", func(j model.Job) []string { return durationValue(j.RuntimeMax) }, func(d *model.Job, s model.Job) { d.RuntimeMax = s.RuntimeMax }},
	{"limit-upload", "Job.LimitUploadKiB", "int", func(j model.Job) []string { return str(strconv.Itoa(j.LimitUploadKiB)) }, func(d *model.Job, s model.Job) { d.LimitUploadKiB = s.LimitUploadKiB }},
	{"schedule", "Job.Schedule", "str", func(j model.Job) []string { return str(j.Schedule) }, func(d *model.Job, s model.Job) { d.Schedule = s.Schedule }},
	{"tz", "Job.TimeZone", "str", func(j model.Job) []string { return str(j.TimeZone) }, func(d *model.Job, s model.Job) { d.TimeZone = s.TimeZone }},
	{"catch-up", "Job.CatchUp", "bool", func(j model.Job) []string { return str(strconv.FormatBool(j.CatchUp)) }, func(d *model.Job, s model.Job) { d.CatchUp = s.CatchUp }},
	{"before", "Job.Backup.BeforeHooks", "list", func(j model.Job) []string { return j.Backup.BeforeHooks }, func(d *model.Job, s model.Job) { d.Backup.BeforeHooks = slices.Clone(s.Backup.BeforeHooks) }},
	{"stdin-from", "Job.Backup.StdinFrom", "str", func(j model.Job) []string { return str(j.Backup.StdinFrom) }, func(d *model.Job, s model.Job) { d.Backup.StdinFrom = s.Backup.StdinFrom }},
	{"fs-snapshot", "Job.Backup.FSSnapshot", "str", func(j model.Job) []string { return str(j.Backup.FSSnapshot) }, func(d *model.Job, s model.Job) { d.Backup.FSSnapshot = s.Backup.FSSnapshot }},
	{"catalog", "Job.Backup.Catalog", "bool", func(j model.Job) []string { return str(strconv.FormatBool(j.Backup.Catalog)) }, func(d *model.Job, s model.Job) { d.Backup.Catalog = s.Backup.Catalog }},
	{"stdin-filename", "Job.Backup.StdinFilename", "str", func(j model.Job) []string { return str(j.Backup.StdinFilename) }, func(d *model.Job, s model.Job) { d.Backup.StdinFilename = s.Backup.StdinFilename }},
	{"copy-to", "Job.Copy.To", "str", func(j model.Job) []string { return str(j.Copy.To) }, func(d *model.Job, s model.Job) { d.Copy.To = s.Copy.To }},
	{"copy-password-file", "Job.Copy.PasswordFile", "str", func(j model.Job) []string { return str(j.Copy.PasswordFile) }, func(d *model.Job, s model.Job) { d.Copy.PasswordFile = s.Copy.PasswordFile }},
	{"copy-env-file", "Job.Copy.EnvFile", "str", func(j model.Job) []string { return str(j.Copy.EnvFile) }, func(d *model.Job, s model.Job) { d.Copy.EnvFile = s.Copy.EnvFile }},
	{"after", "Job.Backup.AfterHooks", "list", func(j model.Job) []string { return j.Backup.AfterHooks }, func(d *model.Job, s model.Job) { d.Backup.AfterHooks = slices.Clone(s.Backup.AfterHooks) }},
	{"window", "Job.Windows", "list", func(j model.Job) []string { return j.Windows }, func(d *model.Job, s model.Job) { d.Windows = slices.Clone(s.Windows) }},
	{"retry-max", "Job.RetryMax", "int", func(j model.Job) []string { return str(strconv.Itoa(j.RetryMax)) }, func(d *model.Job, s model.Job) { d.RetryMax = s.RetryMax }},
	{"retry-backoff", "Job.RetryBackoff", "str", func(j model.Job) []string { return durationValue(j.RetryBackoff) }, func(d *model.Job, s model.Job) { d.RetryBackoff = s.RetryBackoff }},
	{"priority", "Job.Priority", "int", func(j model.Job) []string { return str(strconv.Itoa(j.Priority)) }, func(d *model.Job, s model.Job) { d.Priority = s.Priority }},
	{"depends-on", "Job.DependsOn", "str", func(j model.Job) []string { return str(j.DependsOn) }, func(d *model.Job, s model.Job) { d.DependsOn = s.DependsOn }},
	{"alert-after", "Job.AlertAfter", "str", func(j model.Job) []string { return durationValue(j.AlertAfter) }, func(d *model.Job, s model.Job) { d.AlertAfter = s.AlertAfter }},
	{"alert-failures", "Job.AlertFailures", "int", func(j model.Job) []string { return str(strconv.Itoa(j.AlertFailures)) }, func(d *model.Job, s model.Job) { d.AlertFailures = s.AlertFailures }},
	{"expect-every", "Job.ExpectEvery", "str", func(j model.Job) []string { return durationValue(j.ExpectEvery) }, func(d *model.Job, s model.Job) { d.ExpectEvery = s.ExpectEvery }},
	{"stall-after", "Job.StallAfter", "str", func(j model.Job) []string { return durationValue(j.StallAfter) }, func(d *model.Job, s model.Job) { d.StallAfter = s.StallAfter }},
	{"stall-action", "Job.StallAction", "str", func(j model.Job) []string { return str(j.StallAction) }, func(d *model.Job, s model.Job) { d.StallAction = s.StallAction }},
	{"account", "Job.Account", "str", func(j model.Job) []string { return str(cmp.Or(j.Account, store.DefaultAccount)) }, func(d *model.Job, s model.Job) { d.Account = s.Account }},
	{"max-added", "Job.MaxAdded", "str", func(j model.Job) []string {
		if j.MaxAdded == nil {
			return str("")
		}
		return str(strconv.FormatInt(*j.MaxAdded, 10))
	}, func(d *model.Job, s model.Job) {
		d.MaxAdded = nil
		if s.MaxAdded != nil {
			n := *s.MaxAdded
			d.MaxAdded = &n
		}
	}},
	{"keep-last", "Policy.KeepLast", "int", func(j model.Job) []string { return keepValue(policyOf(j).KeepLast) }, copyRetention},
	{"keep-hourly", "Policy.KeepHourly", "int", func(j model.Job) []string { return keepValue(policyOf(j).KeepHourly) }, copyRetention},
	{"keep-daily", "Policy.KeepDaily", "int", func(j model.Job) []string { return keepValue(policyOf(j).KeepDaily) }, copyRetention},
	{"keep-weekly", "Policy.KeepWeekly", "int", func(j model.Job) []string { return keepValue(policyOf(j).KeepWeekly) }, copyRetention},
	{"keep-monthly", "Policy.KeepMonthly", "int", func(j model.Job) []string { return keepValue(policyOf(j).KeepMonthly) }, copyRetention},
	{"keep-yearly", "Policy.KeepYearly", "int", func(j model.Job) []string { return keepValue(policyOf(j).KeepYearly) }, copyRetention},
	{"keep-within", "Policy.KeepWithin", "str", func(j model.Job) []string {
		if p := policyOf(j); !p.KeepWithin.IsZero() {
			return str(retention.FormatDuration(p.KeepWithin))
		}
		return str("")
	}, copyRetention},
	{"retention-tz", "Policy.TimeZone", "str", func(j model.Job) []string { return str(policyOf(j).TimeZone) }, copyRetention},
	{"retention-max-delete", "Job.Retention.MaxDelete", "int", func(j model.Job) []string {
		return str(strconv.Itoa(int(j.Retention.MaxDelete*100 + 0.5)))
	}, func(d *model.Job, s model.Job) { d.Retention.MaxDelete = s.Retention.MaxDelete }},
	{"retention-min-keep", "Job.Retention.MinKeep", "int", func(j model.Job) []string { return str(strconv.Itoa(j.Retention.MinKeep)) }, func(d *model.Job, s model.Job) { d.Retention.MinKeep = s.Retention.MinKeep }},
	{"prune-schedule", "Job.Prune.Schedule", "str", func(j model.Job) []string { return str(j.Prune.Schedule) }, func(d *model.Job, s model.Job) { d.Prune.Schedule = s.Prune.Schedule }},
	{"append-only", "Job.Prune.AppendOnly", "bool", func(j model.Job) []string { return str(strconv.FormatBool(j.Prune.AppendOnly)) }, func(d *model.Job, s model.Job) { d.Prune.AppendOnly = s.Prune.AppendOnly }},
	{"prune-host", "Job.Prune.Host", "str", func(j model.Job) []string { return str(j.Prune.Host) }, func(d *model.Job, s model.Job) { d.Prune.Host = s.Prune.Host }},
	{"prune-repository", "Job.Prune.Repository", "str", func(j model.Job) []string { return str(j.Prune.Repository) }, func(d *model.Job, s model.Job) { d.Prune.Repository = s.Prune.Repository }},
	{"prune-env-file", "Job.Prune.EnvFile", "str", func(j model.Job) []string { return str(j.Prune.EnvFile) }, func(d *model.Job, s model.Job) { d.Prune.EnvFile = s.Prune.EnvFile }},
	{"verify-schedule", "Job.Verify.Schedule", "str", func(j model.Job) []string { return str(j.Verify.Schedule) }, func(d *model.Job, s model.Job) { d.Verify.Schedule = s.Verify.Schedule }},
	{"verify-read-data", "Job.Verify.ReadData", "str", func(j model.Job) []string { return str(j.Verify.ReadData) }, func(d *model.Job, s model.Job) { d.Verify.ReadData = s.Verify.ReadData }},
	{"verify-alert-after", "Job.Verify.AlertAfter", "str", func(j model.Job) []string { return durationValue(j.Verify.AlertAfter) }, func(d *model.Job, s model.Job) { d.Verify.AlertAfter = s.Verify.AlertAfter }},
	{"drill-schedule", "Job.Drill.Schedule", "str", func(j model.Job) []string { return str(j.Drill.Schedule) }, func(d *model.Job, s model.Job) { d.Drill.Schedule = s.Drill.Schedule }},
	{"drill-files", "Job.Drill.Files", "int", func(j model.Job) []string { return str(strconv.Itoa(j.Drill.Files)) }, func(d *model.Job, s model.Job) { d.Drill.Files = s.Drill.Files }},
}

// changedSettings are the flags of the settings in which a and b differ, in table order.
func changedSettings(a, b model.Job) []string {
	var changed []string
	for _, s := range jobSettings {
		if !slices.Equal(s.render(a), s.render(b)) {
			changed = append(changed, s.flag)
		}
	}
	return changed
}

// copySettings copies the named settings of src onto dst.
func copySettings(dst *model.Job, src model.Job, flags []string) {
	for _, s := range jobSettings {
		if slices.Contains(flags, s.flag) {
			s.copy(dst, src)
		}
	}
}

// targetSetting is one setting of a notification target as `notify add` takes it: its flag, its
// path (package setting), how export writes it (kind) and its value (render).
type targetSetting struct {
	flag   string
	path   string
	kind   string
	render func(model.Target) []string
	// secret: a URL whose path, query or user may be the secret (a check's UUID, a webhook's
	// token), which export prints hidden (hideURL) unless --show-secrets.
	secret bool
}

func targetURL(kind string) func(model.Target) []string {
	return func(t model.Target) []string {
		if t.Kind != kind {
			return str("")
		}
		return str(t.URL)
	}
}

// targetSettings are every setting of a notification target, in the order export writes them.
var targetSettings = []targetSetting{
	{"webhook", "TargetWebhook.URL", "str", targetURL(model.TargetWebhook), true},
	{"healthchecks", "TargetHealthchecks.URL", "str", targetURL(model.TargetHealthchecks), true},
	{"command", "Target.Command", "list", func(t model.Target) []string { return t.Command }, false},
	{"secret-file", "TargetWebhook.SecretFile", "str", func(t model.Target) []string { return str(fileOf(t, model.TargetWebhook)) }, false},
	{"channel-url-file", "TargetChannel.SecretFile", "str", func(t model.Target) []string { return str(fileOf(t, model.TargetChannel)) }, false},
	{"job", "Target.Job", "str", func(t model.Target) []string { return str(t.Job) }, false},
	{"events", "Target.Events", "str", func(t model.Target) []string { return str(strings.Join(t.Events, ",")) }, false},
}

// hiddenMark ends a URL whose secret part export left out (https://hc-ping.com/…), as notify.Redact
// writes it for listings.
const hiddenMark = "/…"

// hideURL is a target's URL as export prints it without --show-secrets: its scheme and host,
// then hiddenMark if anything else was cut off. A URL of a scheme and host alone is whole.
func hideURL(raw string) string {
	hidden := notify.Redact(raw)
	if hidden == raw || strings.HasSuffix(hidden, hiddenMark) {
		return hidden
	}
	return hidden + hiddenMark // Redact dropped a user:password@ or a #fragment, unmarked
}

// hiddenURL reports whether t's URL is one export printed hidden: it stands for the URL stored
// under t's name, not for itself. Only a webhook's and a check's URL is given whole (a
// channel's URL is in its file, and t.URL only shows its scheme and host).
func hiddenURL(t model.Target) bool {
	return (t.Kind == model.TargetWebhook || t.Kind == model.TargetHealthchecks) && strings.HasSuffix(t.URL, hiddenMark)
}

// fileOf is the target's file if it is of kind: a webhook's key, a channel's URL.
func fileOf(t model.Target, kind string) string {
	if t.Kind != kind {
		return ""
	}
	return t.SecretFile
}

// changedTargetSettings are the flags of the settings in which a and b differ.
func changedTargetSettings(a, b model.Target) []string {
	var changed []string
	for _, s := range targetSettings {
		if !slices.Equal(s.render(a), s.render(b)) {
			changed = append(changed, s.flag)
		}
	}
	return changed
}
