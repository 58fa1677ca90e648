package main

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/holdfast-backup/holdfast/credentials"
	"github.com/holdfast-backup/holdfast/safepath"
)

// declaration is one object a configuration file declares: jobs.NAME, notify.NAME or
// accounts.NAME, with its settings as the values of the long flags of `job add`, `notify add`
// or `account add`.
type declaration struct {
	section, name string
	file          string
	line          int
	keys          []declaredKey
}

// declaredKey is one setting of a declaration: a flag's values (several for a flag that
// repeats), and where it was written.
type declaredKey struct {
	name   string
	values []string
	line   int
}

// where is a place in the files, as errors name it.
func (d declaration) where(line int) string { return fmt.Sprintf("%s:%d", d.file, line) }

// path is the declaration's key path, as errors name it: jobs.alpha.
func (d declaration) path() string { return d.section + "." + d.name }

// lineOf is where key was written, or the declaration's own line.
func (d declaration) lineOf(key string) int {
	for _, k := range d.keys {
		if k.name == key {
			return k.line
		}
	}
	return d.line
}

// configSet is what the files declare, with their names and content hash.
type configSet struct {
	files []string
	hash  string
	decls []declaration
}

// The top-level sections of a configuration file.
var configSections = []string{"accounts", "jobs", "notify"}

// maxConfigFile bounds a configuration file: settings, never data.
const maxConfigFile = 1 << 20

// stdinName is what errors and job show call the configuration read from standard input (-).
const stdinName = "stdin"

// readConfig reads the files and directories given (a directory: every *.yaml in it, sorted), and
// standard input for "-". A name declared twice, in one file or two, is refused. Root applies
// what a file says, so each file is read only if no one but root and this user could have
// written it (readConfigFile).
func readConfig(args []string, stdin io.Reader) (configSet, error) {
	var set configSet
	for _, arg := range args {
		if arg == "-" {
			if slices.Contains(set.files, "-") {
				return set, badInput("- is given twice: standard input can be read once")
			}
			set.files = append(set.files, arg)
			continue
		}
		info, err := os.Stat(arg)
		if err != nil {
			return set, badInput("%s: %v", arg, safepath.Cause(err))
		}
		if !info.IsDir() {
			set.files = append(set.files, arg)
			continue
		}
		matches, err := filepath.Glob(filepath.Join(arg, "*.yaml"))
		if err != nil {
			return set, badInput("%s: %v", arg, err)
		}
		sort.Strings(matches)
		set.files = append(set.files, matches...)
	}
	h := sha256.New()
	seen := map[string]declaration{}
	for i, file := range set.files {
		var data []byte
		var err error
		if file == "-" {
			set.files[i] = stdinName
			data, err = readConfigStdin(stdin)
		} else {
			data, err = readConfigFile(file)
		}
		if err != nil {
			return set, err
		}
		fmt.Fprintf(h, "%s\x00%d\x00", set.files[i], len(data))
		h.Write(data)
		decls, err := parseConfig(set.files[i], data)
		if err != nil {
			return set, err
		}
		for _, d := range decls {
			if first, ok := seen[d.path()]; ok {
				return set, badInput("%s: %s is declared twice: first at %s", d.where(d.line), d.path(), first.where(first.line))
			}
			seen[d.path()] = d
			set.decls = append(set.decls, d)
		}
	}
	set.hash = hex.EncodeToString(h.Sum(nil))[:16]
	return set, nil
}

// readConfigStdin reads the configuration from standard input: the operator chose what it holds,
// so only its size is bounded.
func readConfigStdin(stdin io.Reader) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(stdin, maxConfigFile+1))
	if err != nil {
		return nil, fmt.Errorf("read standard input: %w", err)
	}
	if len(data) > maxConfigFile {
		return nil, badInput("standard input holds more than %d MiB, more than any configuration: check what is piped in", maxConfigFile>>20)
	}
	return data, nil
}

// readConfigFile reads a configuration file as root reads a file whose content it acts on
// (credentials.ReadTrusted): no one but root and this user can have written it or put it there.
func readConfigFile(path string) ([]byte, error) {
	data, err := credentials.ReadTrusted(path, maxConfigFile)
	var pe *os.PathError
	switch {
	case errors.Is(err, credentials.ErrTooLarge):
		return nil, badInput("%s is larger than %d MiB, more than any configuration: check that it is the file you meant", path, maxConfigFile>>20)
	case errors.As(err, &pe):
		return nil, badInput("%s: %v", path, pe.Err)
	case err != nil:
		return nil, inputError{err}
	}
	return data, nil
}

// parseConfig reads one file's declarations, refusing anything that is not sections of named
// mappings of settings (scalars, or lists of scalars).
func parseConfig(file string, data []byte) ([]declaration, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, badInput("%s: %s", file, strings.TrimPrefix(err.Error(), "yaml: "))
	}
	if len(doc.Content) == 0 {
		return nil, nil // an empty file declares nothing
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return nil, badInput("%s:%d: a configuration file is a mapping of %s", file, root.Line, strings.Join(configSections, ", "))
	}
	var out []declaration
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		if !slices.Contains(configSections, k.Value) {
			return nil, badInput("%s:%d: %s: unknown key%s", file, k.Line, k.Value, suggest(k.Value, configSections))
		}
		if v.Kind == yaml.ScalarNode && v.Tag == "!!null" {
			continue
		}
		if v.Kind != yaml.MappingNode {
			return nil, badInput("%s:%d: %s: give a mapping of names to settings", file, v.Line, k.Value)
		}
		for j := 0; j+1 < len(v.Content); j += 2 {
			nk, nv := v.Content[j], v.Content[j+1]
			d := declaration{section: k.Value, name: nk.Value, file: file, line: nk.Line}
			if nv.Kind == yaml.ScalarNode && nv.Tag == "!!null" {
				out = append(out, d) // a job of defaults only
				continue
			}
			if nv.Kind != yaml.MappingNode {
				return nil, badInput("%s:%d: %s: give a mapping of settings", file, nv.Line, d.path())
			}
			for m := 0; m+1 < len(nv.Content); m += 2 {
				sk, sv := nv.Content[m], nv.Content[m+1]
				key := declaredKey{name: sk.Value, line: sk.Line}
				switch sv.Kind {
				case yaml.ScalarNode:
					key.values = []string{sv.Value}
				case yaml.SequenceNode:
					key.values = []string{} // an empty list: none
					for _, item := range sv.Content {
						if item.Kind != yaml.ScalarNode {
							return nil, badInput("%s:%d: %s.%s: give a list of plain values", file, item.Line, d.path(), sk.Value)
						}
						key.values = append(key.values, item.Value)
					}
				default:
					return nil, badInput("%s:%d: %s.%s: give a value or a list of values", file, sv.Line, d.path(), sk.Value)
				}
				for _, seen := range d.keys {
					if seen.name == key.name {
						return nil, badInput("%s:%d: %s.%s is given twice (first at line %d)", file, sk.Line, d.path(), key.name, seen.line)
					}
				}
				d.keys = append(d.keys, key)
			}
			out = append(out, d)
		}
	}
	return out, nil
}

// suggest is " (did you mean X?)" for the known name closest to name, if one is close.
func suggest(name string, known []string) string {
	best, bestDist := "", 3
	for _, k := range known {
		if d := editDistance(name, k); d < bestDist {
			best, bestDist = k, d
		}
	}
	if best == "" {
		return ""
	}
	return " (did you mean " + best + "?)"
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}
