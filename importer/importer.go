// Package importer reads the configurations of other restic front ends into holdfast's jobs,
// for `holdfast import`, whose YAML `holdfast apply` takes. What maps becomes a job's setting;
// every other key is a Note saying why it did not map, never dropped silently. Secrets stay
// files: an inline password or environment variable is a Note naming it, never its value.
package importer

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/holdfast-backup/holdfast/credentials"
	"github.com/holdfast-backup/holdfast/jobdef"
	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/retention"
)

// Result is a configuration read: its jobs, and what of it did not map.
type Result struct {
	Jobs  []model.Job
	Notes []Note
}

// Note is a key that did not map: where it is (the profile and its key) and why.
type Note struct {
	Where string
	Why   string
}

func (n Note) String() string { return n.Where + ": " + n.Why }

// notes collects a configuration's notes.
type notes struct{ list []Note }

func (n *notes) add(where, format string, args ...any) {
	n.list = append(n.list, Note{Where: where, Why: fmt.Sprintf(format, args...)})
}

// repository is a repository location as a job may hold it: one with a password in it
// (rest:https://user:password@host/) loses the password, and a note says where it goes instead;
// the password is never copied.
func repository(loc, at string, n *notes) string {
	if credentials.CheckRepository(loc) == nil {
		return loc
	}
	scheme, rest, _ := strings.Cut(loc, "://")
	authority, path, _ := strings.Cut(rest, "/")
	at2 := strings.LastIndex(authority, "@")
	user, _, _ := strings.Cut(authority[:at2], ":")
	n.add(at, "the repository's location holds a password, which is not copied: put it in the job's env-file (RESTIC_REST_PASSWORD, or the backend's own variables)")
	return scheme + "://" + user + authority[at2:] + "/" + path
}

// parseError is why a file does not parse, without what it holds: a parser quotes the value it
// stopped at, which may be a secret. It keeps the line, where the parser gives one.
func parseError(file, what, format string, err error) error {
	line := ""
	if m := lineOf().FindStringSubmatch(err.Error()); m != nil {
		line = " at line " + m[1]
	}
	return fmt.Errorf("%s: not %s: its %s does not parse%s", file, what, format, line)
}

var lineOf = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`line (\d+)`) })

// jobNameChars are the characters a job's name may not have (jobdef.ValidateName's rule).
var jobNameChars = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`[^a-z0-9._-]+`) })

// newJob is a restic job named for name (a profile, plan or location), a note at where saying
// so when the name had to change.
func newJob(name, where string, n *notes) model.Job {
	j := jobdef.New(jobName(name))
	j.Engine = "restic"
	if j.Name != name {
		n.add(where, "the job is called %s: a job's name is lower case letters, digits, '.', '_' and '-'", j.Name)
	}
	return j
}

// setPolicy sets a retention policy read from the configuration as the job's; none leaves it
// without one.
func setPolicy(j *model.Job, p retention.Policy) error {
	if p.IsZero() {
		return nil
	}
	if err := p.Validate(); err != nil {
		return fmt.Errorf("retention: %w", err)
	}
	b, err := json.Marshal(p)
	if err != nil {
		return err
	}
	j.Retention.Policy = b
	return nil
}

// jobName is a profile's name as a job's: lower case, other characters as "-".
func jobName(profile string) string {
	name := strings.Trim(jobNameChars().ReplaceAllString(strings.ToLower(profile), "-"), "-._")
	if name == "" {
		name = "imported"
	}
	return name
}

// stringsOf reads a value that is a string or a list of strings (TOML, YAML and JSON give
// []any or []string); ok is false for anything else.
func stringsOf(v any) (list []string, ok bool) {
	switch v := v.(type) {
	case string:
		return []string{v}, true
	case []string:
		return v, true
	case []any:
		for _, e := range v {
			s, isString := e.(string)
			if !isString {
				return nil, false
			}
			list = append(list, s)
		}
		return list, true
	}
	return nil, false
}

// intOf reads a whole number.
func intOf(v any) (int, bool) {
	switch v := v.(type) {
	case int:
		return v, true
	case int64:
		return int(v), true
	case uint64:
		return int(v), true
	case float64:
		if v == float64(int(v)) {
			return int(v), true
		}
	}
	return 0, false
}

// boolOf reads a boolean.
func boolOf(v any) (value, ok bool) {
	b, ok := v.(bool)
	return b, ok
}

// mapOf reads a section.
func mapOf(v any) (map[string]any, bool) {
	m, ok := v.(map[string]any)
	return m, ok
}

// sortedKeys are a section's keys in order, for notes that read the same every time.
func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// sortedKeysOf is a count's keys in order.
func sortedKeysOf(m map[string]int) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
