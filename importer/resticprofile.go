package importer

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/BurntSushi/toml"
	"go.yaml.in/yaml/v3"

	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/retention"
)

// Resticprofile reads a resticprofile configuration (its version 1 or 2; TOML for a name
// ending .toml or .conf, JSON for .json, YAML otherwise): each profile with a backup source
// is a job; profiles others inherit from give them their keys (inherit, resolved as
// resticprofile does: the profile's own keys over its parent's, section by section).
func Resticprofile(file string, data []byte) (Result, error) {
	doc := map[string]any{}
	var err error
	format := "YAML"
	switch strings.ToLower(filepath.Ext(file)) {
	case ".toml", ".conf":
		format = "TOML"
		_, err = toml.Decode(string(data), &doc)
	case ".json":
		format = "JSON"
		err = json.Unmarshal(data, &doc)
	default:
		err = yaml.Unmarshal(data, &doc)
	}
	if err != nil {
		return Result{}, parseError(file, "a resticprofile configuration", format, err)
	}
	var n notes
	var profiles map[string]any
	global, _ := mapOf(doc["global"])
	if v, ok := doc["version"]; ok && fmt.Sprint(v) == "2" {
		profiles, ok = mapOf(doc["profiles"])
		if !ok {
			return Result{}, fmt.Errorf("%s: a version 2 configuration without its profiles section", file)
		}
		for _, key := range sortedKeys(doc) {
			switch key {
			case "version", "profiles":
			case "global":
				globalKeys(global, &n)
			case "groups":
				n.add(key, "holdfast runs each job on its own schedule; to run one after another, give the later one depends-on")
			case "includes":
				n.add(key, "the files it includes are not read: import each of them")
			case "mixins":
				n.add(key, "mixins are not applied: import a configuration without them, or check what each profile lacks")
			default:
				n.add(key, "not a section of resticprofile's version 2 configuration")
			}
		}
	} else {
		profiles = map[string]any{}
		for _, key := range sortedKeys(doc) {
			switch key {
			case "version":
			case "global":
				globalKeys(global, &n)
			case "groups":
				n.add(key, "holdfast runs each job on its own schedule; to run one after another, give the later one depends-on")
			case "includes":
				n.add(key, "the files it includes are not read: import each of them")
			default:
				profiles[key] = doc[key]
			}
		}
	}
	var res Result
	names := map[string]string{}
	for _, name := range sortedKeys(profiles) {
		p, err := inherited(profiles, name, nil)
		if err != nil {
			return Result{}, fmt.Errorf("%s: %w", file, err)
		}
		where := "profile " + name
		backup, _ := mapOf(p["backup"])
		if _, hasSource := backup["source"]; !hasSource && backup["stdin-command"] == nil {
			n.add(where, "no backup source: not a job of its own (what it sets reaches the profiles that inherit it)")
			continue
		}
		j, err := profileJob(name, p, global, &n)
		if err != nil {
			return Result{}, fmt.Errorf("%s: profile %s: %w", file, name, err)
		}
		if other, dup := names[j.Name]; dup {
			return Result{}, fmt.Errorf("%s: profiles %s and %s are both job %s: rename one", file, other, name, j.Name)
		}
		names[j.Name] = name
		res.Jobs = append(res.Jobs, j)
	}
	res.Notes = n.list
	return res, nil
}

// inherited is profile name with what it inherits merged under its own keys.
func inherited(profiles map[string]any, name string, seen []string) (map[string]any, error) {
	if slices.Contains(seen, name) {
		return nil, fmt.Errorf("profile %s inherits from itself (%s)", name, strings.Join(append(seen, name), " → "))
	}
	p, ok := mapOf(profiles[name])
	if !ok {
		return nil, fmt.Errorf("profile %s is not a section", name)
	}
	parent, ok := p["inherit"].(string)
	if !ok {
		return p, nil
	}
	base, err := inherited(profiles, parent, append(seen, name))
	if err != nil {
		return nil, err
	}
	return merge(base, p), nil
}

// merge is over's keys over base's, sections merged key by key.
func merge(base, over map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range base {
		out[k] = v
	}
	for k, v := range over {
		bm, bok := mapOf(out[k])
		om, ook := mapOf(v)
		if bok && ook {
			out[k] = merge(bm, om)
			continue
		}
		out[k] = v
	}
	delete(out, "inherit")
	return out
}

// ioClasses are ionice's classes by number, as resticprofile's ionice-class gives them.
var ioClasses = map[int]string{1: "realtime", 2: "best-effort", 3: "idle"}

// profileJob maps one (inherited) profile to a job.
func profileJob(name string, p, global map[string]any, n *notes) (model.Job, error) {
	where := "profile " + name
	j := newJob(name, where, n)
	var policy retention.Policy
	// nice and ionice are resticprofile's global settings: every job of the file gets them.
	if i, ok := intOf(global["nice"]); ok {
		j.Nice = &i
	}
	if c, ok := intOf(global["ionice-class"]); ok && global["ionice"] == true && ioClasses[c] != "" {
		j.IOSchedulingClass = ioClasses[c]
	}
	for _, key := range sortedKeys(p) {
		v := p[key]
		at := where + ": " + key
		switch key {
		case "repository":
			s, ok := v.(string)
			if !ok {
				return j, fmt.Errorf("repository: want a string")
			}
			j.Repository = repository(s, at, n)
		case "password-file":
			s, ok := v.(string)
			if !ok {
				return j, fmt.Errorf("password-file: want a string")
			}
			j.PasswordFile = s
		case "password", "repository-file":
			n.add(at, "a secret given inline is never copied: write it to a file only root can read and give password-file (the repository as repo)")
		case "env":
			vars, _ := mapOf(v)
			n.add(at, "variables %s: write them to a file only root can read, one NAME=value a line, and give env-file (their values are not copied)",
				strings.Join(sortedKeys(vars), ", "))
		case "nice":
			if i, ok := intOf(v); ok {
				j.Nice = &i
			} else {
				n.add(at, "not a number")
			}
		case "ionice":
		case "ionice-class":
			if i, ok := intOf(v); ok && ioClasses[i] != "" && p["ionice"] == true {
				j.IOSchedulingClass = ioClasses[i]
			} else {
				n.add(at, "not ionice's class 1, 2 or 3, or ionice is not on")
			}
		case "run-before":
			// A profile's hooks run around its every command, a backup's too.
			j.Backup.BeforeHooks = append(hooks(v, at, n), j.Backup.BeforeHooks...)
			n.add(at, "holdfast runs it before backups only")
		case "run-after", "run-finally":
			j.Backup.AfterHooks = append(j.Backup.AfterHooks, hooks(v, at, n)...)
			n.add(at, "holdfast runs it after backups only, whatever the outcome (HOLDFAST_OUTCOME)")
		case "limit-upload":
			if i, ok := intOf(v); ok {
				j.LimitUploadKiB = i
			} else {
				n.add(at, "not a number of KiB/s")
			}
		case "backup":
			section, _ := mapOf(v)
			backupKeys(section, &j, at, n)
		case "retention", "forget":
			section, _ := mapOf(v)
			if key == "forget" && p["retention"] != nil {
				n.add(at, "the retention section is the job's policy: this one is not read")
				continue
			}
			retentionKeys(section, &policy, at, n)
		case "check":
			section, _ := mapOf(v)
			for _, k := range sortedKeys(section) {
				switch k {
				case "schedule":
					j.Verify.Schedule = cronSchedule(section[k], at+".schedule", n)
				case "read-data-subset":
					j.Verify.ReadData = fmt.Sprint(section[k])
				case "read-data":
					if b, ok := boolOf(section[k]); ok && b {
						j.Verify.ReadData = "100%"
					} else if !ok {
						n.add(at+".read-data", "not true or false")
					}
				default:
					n.add(at+"."+k, "no holdfast equivalent: a verification is restic check, with verify-read-data")
				}
			}
		case "prune":
			section, _ := mapOf(v)
			for _, k := range sortedKeys(section) {
				if k == "schedule" {
					j.Prune.Schedule = cronSchedule(section[k], at+".schedule", n)
					continue
				}
				n.add(at+"."+k, "no holdfast equivalent: a prune is restic prune, on prune-schedule")
			}
		case "description":
			n.add(at, "holdfast keeps no description of a job")
		case "initialize":
			n.add(at, "holdfast does not create repositories: run restic init once")
		default:
			n.add(at, "no holdfast equivalent")
		}
	}
	if err := setPolicy(&j, policy); err != nil {
		return j, err
	}
	if j.Schedule != "" {
		n.add(where+": backup.schedule", "resticprofile schedules on the machine's local time; holdfast's are in the job's tz, UTC unless given: set tz")
	}
	return j, nil
}

// backupKeys maps a profile's backup section onto j.
func backupKeys(section map[string]any, j *model.Job, at string, n *notes) {
	for _, k := range sortedKeys(section) {
		v := section[k]
		key := at + "." + k
		switch k {
		case "source":
			if s, ok := stringsOf(v); ok {
				j.Paths = s
			} else {
				n.add(key, "not a path or a list of paths")
			}
		case "exclude":
			if s, ok := stringsOf(v); ok {
				j.Excludes = s
			} else {
				n.add(key, "not a pattern or a list of patterns")
			}
		case "schedule":
			j.Schedule = cronSchedule(v, key, n)
		case "run-before":
			j.Backup.BeforeHooks = hooks(v, key, n)
		case "run-after", "run-finally":
			j.Backup.AfterHooks = append(j.Backup.AfterHooks, hooks(v, key, n)...)
			if k == "run-after" {
				n.add(key, "an after hook in holdfast runs whatever the outcome, which it reads in HOLDFAST_OUTCOME; resticprofile's only after a success")
			}
		case "stdin":
			if section["stdin-command"] == nil {
				n.add(key, "restic's own standard input: holdfast backs up a command's output (stdin-command, stdin-from)")
			}
		case "stdin-command":
			if s, ok := stringsOf(v); ok && len(s) == 1 {
				j.Backup.StdinFrom = hooks(s, key, n)[0]
				j.Paths = nil
			} else {
				n.add(key, "one command line is backed up from its output in holdfast")
			}
		case "stdin-filename":
			if s, ok := v.(string); ok {
				j.Backup.StdinFilename = s
			} else {
				n.add(key, "not a name")
			}
		case "check-before", "check-after":
			n.add(key, "holdfast verifies on its own schedule: give verify-schedule")
		case "schedule-permission", "schedule-lock-wait", "schedule-lock-mode", "schedule-priority", "schedule-log", "schedule-after-network-online":
			n.add(key, "holdfast's daemon schedules every job: its runs are transient units of its own, one at a time for a job")
		default:
			n.add(key, "no holdfast equivalent (restic backup runs with the job's paths and excludes)")
		}
	}
	if section["stdin-command"] != nil && j.Backup.StdinFilename == "" {
		j.Backup.StdinFilename = "stdin"
	}
}

// retentionKeys maps a retention (or forget) section onto policy.
func retentionKeys(section map[string]any, policy *retention.Policy, at string, n *notes) {
	counts := map[string]*int{"keep-last": &policy.KeepLast, "keep-hourly": &policy.KeepHourly, "keep-daily": &policy.KeepDaily,
		"keep-weekly": &policy.KeepWeekly, "keep-monthly": &policy.KeepMonthly, "keep-yearly": &policy.KeepYearly}
	for _, k := range sortedKeys(section) {
		v := section[k]
		key := at + "." + k
		switch {
		case counts[k] != nil:
			switch i, ok := intOf(v); {
			case ok && i >= 0:
				*counts[k] = i
			case ok:
				n.add(key, "%d keeps every one in restic: a job without this rule keeps them by its other rules, or without a policy all", i)
			default:
				n.add(key, "not a number")
			}
		case k == "keep-within":
			d, err := retention.ParseDuration(fmt.Sprint(v))
			if err != nil {
				n.add(key, "%v", err)
				continue
			}
			policy.KeepWithin = d
		case k == "after-backup" || k == "before-backup" || k == "prune" || k == "schedule":
			n.add(key, "holdfast applies the job's policy with a reason for each snapshot: holdfast retention plan, then apply; prune on prune-schedule")
		default:
			n.add(key, "no holdfast equivalent: a policy keeps the job's own snapshots by count and age")
		}
	}
}

// cronSchedule converts a schedule (resticprofile's: systemd calendar expressions, one or a list);
// what has no cron form is a note, and "" is no schedule.
func cronSchedule(v any, at string, n *notes) string {
	list, ok := stringsOf(v)
	if !ok || len(list) == 0 {
		n.add(at, "not a calendar expression")
		return ""
	}
	cron, ok := cronOf(list[0])
	if !ok {
		n.add(at, "%q has no cron form here: give the job a schedule such as \"30 2 * * *\"", list[0])
		return ""
	}
	for _, more := range list[1:] {
		n.add(at, "a job has one schedule: %q is left out", more)
	}
	return cron
}

// hooks reads a hook's command lines, each run by sh -c as the tool runs it: its variables,
// globs, pipes and lines mean what they meant there.
func hooks(v any, at string, n *notes) []string {
	list, ok := stringsOf(v)
	if !ok {
		n.add(at, "not a command line or a list of them")
		return nil
	}
	out := make([]string, 0, len(list))
	for _, line := range list {
		out = append(out, "/bin/sh -c "+shellQuote(line))
	}
	return out
}

// globalKeys notes resticprofile's global section: nice and ionice reach every job, the rest is
// resticprofile's own.
func globalKeys(global map[string]any, n *notes) {
	for _, k := range sortedKeys(global) {
		switch k {
		case "nice", "ionice", "ionice-class":
		default:
			n.add("global."+k, "resticprofile's own setting: the daemon's flags are holdfast's")
		}
	}
}

// shellQuote quotes s as one shell word.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
