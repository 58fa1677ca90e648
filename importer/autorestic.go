package importer

import (
	"fmt"
	"path/filepath"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/retention"
	"github.com/holdfast-backup/holdfast/schedule"
)

// DefaultSecretDir is where an import asks for the secrets a tool keeps inline (autorestic's
// backend keys and environment), unless told another directory: the job names a file there,
// which the operator writes.
const DefaultSecretDir = "/etc/holdfast/imported"

// Autorestic reads an autorestic configuration (.autorestic.yml, version 2): each location is a
// job for each backend it backs up to (named location, or location-backend for more than one),
// its backend the job's repository. autorestic keeps a backend's key and environment inline:
// the job names a file in secretDir for each ("" is DefaultSecretDir), and a note says what to
// write there.
func Autorestic(file string, data []byte, secretDir string) (Result, error) {
	if secretDir == "" {
		secretDir = DefaultSecretDir
	}
	doc := map[string]any{}
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return Result{}, parseError(file, "an autorestic configuration", "YAML", err)
	}
	locations, ok := mapOf(doc["locations"])
	if !ok {
		return Result{}, fmt.Errorf("%s: not an autorestic configuration: no locations section", file)
	}
	backends, _ := mapOf(doc["backends"])
	var n notes
	var global retention.Policy
	for _, key := range sortedKeys(doc) {
		switch key {
		case "version":
			if fmt.Sprint(doc[key]) != "2" {
				n.add(key, "this reads autorestic's version 2 configuration; check what it made of a version %v", doc[key])
			}
		case "locations", "backends":
		case "global":
			g, _ := mapOf(doc[key])
			for _, k := range sortedKeys(g) {
				if k == "forget" {
					f, _ := mapOf(g[k])
					retentionKeys(f, &global, "global.forget", &n)
					continue
				}
				n.add("global."+k, "no holdfast equivalent: a job's options are its own settings")
			}
		default:
			n.add(key, "not a section holdfast reads")
		}
	}
	for _, name := range sortedKeys(backends) {
		b, _ := mapOf(backends[name])
		for _, k := range sortedKeys(b) {
			switch k {
			case "type", "path":
			case "key":
				n.add("backend "+name+": key", "the repository's password is never copied: write it to %s", secretFile(secretDir, name, "key"))
			case "env":
				vars, _ := mapOf(b[k])
				n.add("backend "+name+": env", "variables %s: write them to %s, one NAME=value a line (their values are not copied)",
					strings.Join(sortedKeys(vars), ", "), secretFile(secretDir, name, "env"))
			default:
				n.add("backend "+name+": "+k, "no holdfast equivalent: the job's repository is its type and path")
			}
		}
	}
	var res Result
	seen := map[string]string{}
	for _, name := range sortedKeys(locations) {
		loc, ok := mapOf(locations[name])
		if !ok {
			return Result{}, fmt.Errorf("%s: location %s is not a section", file, name)
		}
		where := "location " + name
		if t, _ := loc["type"].(string); t == "volume" {
			n.add(where, "a Docker volume: holdfast backs up paths; back up the volume's directory instead")
			continue
		}
		to, ok := stringsOf(loc["to"])
		if !ok || len(to) == 0 {
			return Result{}, fmt.Errorf("%s: location %s backs up to no backend (to)", file, name)
		}
		for _, backend := range to {
			b, ok := mapOf(backends[backend])
			if !ok {
				return Result{}, fmt.Errorf("%s: location %s backs up to backend %s, which the configuration lacks", file, name, backend)
			}
			jname := name
			if len(to) > 1 {
				jname = name + "-" + backend
			}
			j, err := locationJob(jname, backend, loc, b, global, where, secretDir, filepath.Dir(file), &n)
			if err != nil {
				return Result{}, fmt.Errorf("%s: location %s: %w", file, name, err)
			}
			if other, dup := seen[j.Name]; dup {
				return Result{}, fmt.Errorf("%s: %s and %s are both job %s: rename one", file, other, jname, j.Name)
			}
			seen[j.Name] = jname
			res.Jobs = append(res.Jobs, j)
		}
	}
	res.Notes = n.list
	return res, nil
}

// secretFile is the file an import asks for a backend's secret in.
func secretFile(dir, backend, what string) string {
	return filepath.Join(dir, jobName(backend)+"."+what)
}

// repositoryOf is a backend's restic repository: its path, after its type unless local (a
// relative one is the configuration file's directory's, as autorestic reads it).
func repositoryOf(b map[string]any, dir string) (string, error) {
	typ, _ := b["type"].(string)
	path, _ := b["path"].(string)
	if path == "" {
		return "", fmt.Errorf("a backend without a path")
	}
	if typ == "" || typ == "local" {
		return localPath(path, dir), nil
	}
	return typ + ":" + path, nil
}

// localPath is a path of the configuration, absolute: a relative one is dir's.
func localPath(p, dir string) string {
	if filepath.IsAbs(p) || strings.HasPrefix(p, "~") {
		return p
	}
	abs, err := filepath.Abs(filepath.Join(dir, p))
	if err != nil {
		return p
	}
	return abs
}

// locationJob maps a location backed up to one backend to a job.
func locationJob(name, backend string, loc, b map[string]any, global retention.Policy, where, secretDir, dir string, n *notes) (model.Job, error) {
	j := newJob(name, where, n)
	repo, err := repositoryOf(b, dir)
	if err != nil {
		return j, fmt.Errorf("backend %s: %w", backend, err)
	}
	j.Repository = repository(repo, "backend "+backend+": path", n)
	j.PasswordFile = secretFile(secretDir, backend, "key")
	if _, hasKey := b["key"]; !hasKey {
		n.add(where, "backend %s has no key here (autorestic writes one when it first runs): put the repository's password in %s", backend, j.PasswordFile)
	}
	if _, hasEnv := b["env"]; hasEnv {
		j.EnvFile = secretFile(secretDir, backend, "env")
	}
	policy := global
	for _, key := range sortedKeys(loc) {
		v := loc[key]
		at := where + ": " + key
		switch key {
		case "from":
			if s, ok := stringsOf(v); ok {
				for _, p := range s {
					if strings.HasPrefix(p, "~") {
						n.add(at, "%q is a home directory's: give its absolute path", p)
					}
					j.Paths = append(j.Paths, localPath(p, dir))
				}
			} else {
				return j, fmt.Errorf("from: want a path or a list of paths")
			}
		case "to", "type":
		case "cron":
			s, _ := v.(string)
			if _, err := schedule.Parse(s, ""); err != nil {
				n.add(at, "%q is not a cron expression holdfast reads: give the job a schedule", s)
				continue
			}
			j.Schedule = s
			n.add(at, "autorestic's cron runs on the machine's local time; holdfast's are in the job's tz, UTC unless given: set tz")
		case "hooks":
			h, _ := mapOf(v)
			for _, k := range sortedKeys(h) {
				switch k {
				case "before":
					j.Backup.BeforeHooks = hooks(h[k], at+".before", n)
				case "after":
					j.Backup.AfterHooks = append(j.Backup.AfterHooks, hooks(h[k], at+".after", n)...)
				case "dir":
					n.add(at+"."+k, "holdfast's hooks run in /: give the commands absolute paths, or cd in them")
				default:
					n.add(at+"."+k, "holdfast's after hooks run whatever the outcome and read it in HOLDFAST_OUTCOME: fold these into one")
				}
			}
		case "options":
			o, _ := mapOf(v)
			for _, cmd := range sortedKeys(o) {
				opts, _ := mapOf(o[cmd])
				switch cmd {
				case "backup":
					for _, k := range sortedKeys(opts) {
						if k == "exclude" {
							if s, ok := stringsOf(opts[k]); ok {
								j.Excludes = s
								continue
							}
						}
						n.add(at+".backup."+k, "no holdfast equivalent (restic backup runs with the job's paths and excludes)")
					}
				case "forget":
					retentionKeys(opts, &policy, at+".forget", n)
				default:
					n.add(at+"."+cmd, "no holdfast equivalent: holdfast runs restic's commands with their own settings")
				}
			}
		case "forget":
			n.add(at, "holdfast applies the job's policy with a reason for each snapshot: holdfast retention plan, then apply; prune on prune-schedule")
		case "copy":
			n.add(at, "each backend of the location is a job of its own here; a copy between repositories is a job's copy-to")
		default:
			n.add(at, "no holdfast equivalent")
		}
	}
	if err := setPolicy(&j, policy); err != nil {
		return j, err
	}
	return j, nil
}
