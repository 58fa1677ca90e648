package importer

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/retention"
	"github.com/holdfast-backup/holdfast/schedule"
)

// Backrest reads a Backrest configuration (its config.json): each plan is a job, its repo's
// URI the job's repository and the repo's prune and check policies its prune and verify
// schedules. Backrest keeps a repo's password and environment inline: the job names a file in
// secretDir for each ("" is DefaultSecretDir), and a note says what to write there.
func Backrest(file string, data []byte, secretDir string) (Result, error) {
	if secretDir == "" {
		secretDir = DefaultSecretDir
	}
	doc := map[string]any{}
	if err := json.Unmarshal(data, &doc); err != nil {
		return Result{}, parseError(file, "a Backrest configuration", "JSON", err)
	}
	var n notes
	repos := map[string]map[string]any{}
	list, _ := doc["repos"].([]any)
	for i, r := range list {
		repo, ok := mapOf(r)
		id, _ := repo["id"].(string)
		if !ok || id == "" {
			return Result{}, fmt.Errorf("%s: repos[%d] has no id", file, i)
		}
		repos[id] = repo
		for _, k := range sortedKeys(repo) {
			at := "repo " + id + ": " + k
			switch k {
			case "id", "uri", "guid", "prunePolicy", "checkPolicy":
			case "password":
				n.add(at, "the repository's password is never copied: write it to %s", secretFile(secretDir, id, "key"))
			case "env":
				vars, _ := stringsOf(repo[k])
				names := make([]string, 0, len(vars))
				for _, v := range vars {
					name, _, _ := strings.Cut(v, "=")
					names = append(names, name)
				}
				n.add(at, "variables %s: write them to %s, one NAME=value a line (their values are not copied)",
					strings.Join(names, ", "), secretFile(secretDir, id, "env"))
			case "hooks":
				n.add(at, "a repo's hooks are not a job's: give the jobs before and after hooks, or holdfast notify add")
			default:
				n.add(at, "no holdfast equivalent")
			}
		}
	}
	for _, key := range sortedKeys(doc) {
		switch key {
		case "repos", "plans", "modno", "version":
		case "instance":
			n.add(key, "holdfast's host is the daemon's --host; apply pins the jobs to the host that applies them")
		case "auth":
			n.add(key, "the dashboard's credentials are holdfast's web.auth file (bearer or basic, with operator for restores)")
		default:
			n.add(key, "no holdfast equivalent")
		}
	}
	var res Result
	plans, _ := doc["plans"].([]any)
	perRepo := map[string]int{}
	for _, p := range plans {
		plan, _ := mapOf(p)
		if id, ok := plan["repo"].(string); ok {
			perRepo[id]++
		}
	}
	for _, id := range sortedKeysOf(perRepo) {
		if perRepo[id] > 1 && (repos[id]["prunePolicy"] != nil || repos[id]["checkPolicy"] != nil) {
			n.add("repo "+id, "its prune and check schedules are each of its %d jobs' now: keep them on one job", perRepo[id])
		}
	}
	seen := map[string]bool{}
	for i, p := range plans {
		plan, ok := mapOf(p)
		id, _ := plan["id"].(string)
		if !ok || id == "" {
			return Result{}, fmt.Errorf("%s: plans[%d] has no id", file, i)
		}
		j, err := planJob(id, plan, repos, secretDir, &n)
		if err != nil {
			return Result{}, fmt.Errorf("%s: plan %s: %w", file, id, err)
		}
		if seen[j.Name] {
			return Result{}, fmt.Errorf("%s: two plans are job %s: rename one", file, j.Name)
		}
		seen[j.Name] = true
		res.Jobs = append(res.Jobs, j)
	}
	res.Notes = n.list
	return res, nil
}

// planJob maps a plan, and its repo's policies, to a job.
func planJob(id string, plan map[string]any, repos map[string]map[string]any, secretDir string, n *notes) (model.Job, error) {
	where := "plan " + id
	j := newJob(id, where, n)
	repoID, _ := plan["repo"].(string)
	repo, ok := repos[repoID]
	if !ok {
		return j, fmt.Errorf("its repo %q is not among the repos", repoID)
	}
	uri, _ := repo["uri"].(string)
	if uri == "" {
		return j, fmt.Errorf("repo %s has no uri", repoID)
	}
	j.Repository = repository(uri, "repo "+repoID+": uri", n)
	j.PasswordFile = secretFile(secretDir, repoID, "key")
	if _, hasEnv := repo["env"]; hasEnv {
		j.EnvFile = secretFile(secretDir, repoID, "env")
	}
	if pp, ok := mapOf(repo["prunePolicy"]); ok {
		j.Prune.Schedule = backrestSchedule(pp["schedule"], "repo "+repoID+": prunePolicy.schedule", n)
		for _, k := range sortedKeys(pp) {
			if k != "schedule" {
				n.add("repo "+repoID+": prunePolicy."+k, "no holdfast equivalent: a prune is restic prune, on prune-schedule")
			}
		}
	}
	if cp, ok := mapOf(repo["checkPolicy"]); ok {
		j.Verify.Schedule = backrestSchedule(cp["schedule"], "repo "+repoID+": checkPolicy.schedule", n)
		for _, k := range sortedKeys(cp) {
			switch k {
			case "schedule":
			case "readDataSubsetPercent":
				if pct, ok := cp[k].(float64); ok && pct > 0 && pct <= 100 {
					j.Verify.ReadData = fmt.Sprintf("%g%%", pct)
				} else {
					n.add("repo "+repoID+": checkPolicy."+k, "not a percentage above 0 and at most 100")
				}
			default:
				n.add("repo "+repoID+": checkPolicy."+k, "no holdfast equivalent: a verification is restic check, with verify-read-data")
			}
		}
	}
	var policy retention.Policy
	for _, key := range sortedKeys(plan) {
		v := plan[key]
		at := where + ": " + key
		switch key {
		case "id", "repo":
		case "paths":
			if s, ok := stringsOf(v); ok {
				j.Paths = s
			} else {
				return j, fmt.Errorf("paths: want a list of paths")
			}
		case "excludes":
			if s, ok := stringsOf(v); ok {
				j.Excludes = s
			}
		case "schedule":
			j.Schedule = backrestSchedule(v, at, n)
		case "retention":
			r, _ := mapOf(v)
			backrestRetention(r, &policy, at, n)
			n.add(at, "Backrest forgets after each backup; holdfast applies the job's policy with a reason for each snapshot: holdfast retention plan, then apply")
		case "hooks":
			hs, _ := v.([]any)
			for i, h := range hs {
				backrestHook(h, &j, fmt.Sprintf("%s[%d]", at, i), n)
			}
		default:
			n.add(at, "no holdfast equivalent (restic backup runs with the job's paths and excludes)")
		}
	}
	if err := setPolicy(&j, policy); err != nil {
		return j, err
	}
	return j, nil
}

// backrestSchedule converts a Backrest schedule: a cron, or a most-frequent interval ("@every").
func backrestSchedule(v any, at string, n *notes) string {
	s, ok := mapOf(v)
	if !ok {
		return ""
	}
	var out string
	for _, k := range sortedKeys(s) {
		switch k {
		case "cron":
			c, _ := s[k].(string)
			if _, err := schedule.Parse(c, ""); err != nil {
				n.add(at+".cron", "%q is not a cron expression holdfast reads: give the job a schedule", c)
				continue
			}
			out = c
		case "maxFrequencyDays", "maxFrequencyHours":
			if i, ok := intOf(s[k]); ok && i > 0 {
				hours := i
				if k == "maxFrequencyDays" {
					hours *= 24
				}
				out = fmt.Sprintf("@every %dh", hours)
			}
		case "disabled":
		case "clock":
			if c, _ := s[k].(string); c != "CLOCK_UTC" {
				n.add(at+".clock", "holdfast's schedules are in the job's tz, UTC unless given: set tz (Backrest's was %s)", c)
			}
		default:
			n.add(at+"."+k, "no holdfast equivalent")
		}
	}
	if _, hasClock := s["clock"]; !hasClock && out != "" && s["cron"] != nil {
		n.add(at, "Backrest's cron runs on the machine's local time (its default clock); holdfast's are in the job's tz, UTC unless given: set tz")
	}
	if d, _ := boolOf(s["disabled"]); d {
		return ""
	}
	return out
}

// backrestRetention maps a plan's retention onto policy.
func backrestRetention(r map[string]any, policy *retention.Policy, at string, n *notes) {
	for _, k := range sortedKeys(r) {
		switch k {
		case "policyKeepLastN":
			policy.KeepLast, _ = intOf(r[k])
		case "policyKeepAll":
			n.add(at+"."+k, "a job without a policy keeps every snapshot")
		case "policyTimeBucketed":
			b, _ := mapOf(r[k])
			counts := map[string]*int{"hourly": &policy.KeepHourly, "daily": &policy.KeepDaily, "weekly": &policy.KeepWeekly,
				"monthly": &policy.KeepMonthly, "yearly": &policy.KeepYearly, "keepLastN": &policy.KeepLast}
			for _, bk := range sortedKeys(b) {
				if c := counts[bk]; c != nil {
					*c, _ = intOf(b[bk])
					continue
				}
				n.add(at+"."+k+"."+bk, "no holdfast equivalent")
			}
		default:
			n.add(at+"."+k, "no holdfast equivalent: a policy keeps the job's own snapshots by count and age")
		}
	}
}

// backrestHook maps a plan's hook: a command at a snapshot's start is a before hook, at its end
// an after hook; any other condition or action is a note.
func backrestHook(h any, j *model.Job, at string, n *notes) {
	hook, _ := mapOf(h)
	for _, k := range sortedKeys(hook) {
		if k != "conditions" && k != "actionCommand" {
			n.add(at+"."+k, "no holdfast equivalent: a failing before hook fails the run, an after hook's failure is recorded")
		}
	}
	conds, _ := stringsOf(hook["conditions"])
	action, _ := mapOf(hook["actionCommand"])
	command, _ := action["command"].(string)
	if command == "" {
		n.add(at, "only a command hook maps (notifications are holdfast notify add)")
		return
	}
	if len(conds) == 0 {
		n.add(at, "a hook without conditions never runs in Backrest: not mapped")
	}
	if _, hasOnError := hook["onError"]; !hasOnError && slices.Contains(conds, "CONDITION_SNAPSHOT_START") {
		n.add(at, "Backrest ignores this hook's failure (its default onError); in holdfast a failing before hook fails the run")
	}
	for _, c := range conds {
		switch c {
		case "CONDITION_SNAPSHOT_START":
			j.Backup.BeforeHooks = append(j.Backup.BeforeHooks, hooks(command, at, n)...)
		case "CONDITION_SNAPSHOT_END":
			j.Backup.AfterHooks = append(j.Backup.AfterHooks, hooks(command, at, n)...)
		default:
			n.add(at, "condition %s: holdfast's after hooks run whatever the outcome and read it in HOLDFAST_OUTCOME", c)
		}
	}
}
