// Package catalog keeps, for the jobs that ask for it (job add --catalog), a listing of their
// newest snapshots on the host's disk, so that a snapshot's directory is listed without restic,
// whose every command first opens the repository (its key, its index) and, up to 0.18, loads
// every subtree of the directories it lists. A snapshot never changes: its catalog, made once
// from `restic ls --recursive` as the job's user (the very listing `snapshot ls` reads), stays
// true for as long as the snapshot exists. Builder makes them after backups; Browser answers
// from them and asks restic for what no catalog holds.
//
// A catalog is a gzip file, <dir>/<job>/<snapshot>.gz, root's and closed to others, written
// whole or not at all (a temporary file renamed into place). Each line is an entry of the
// snapshot in restic's order (depth first, by name): its path as a JSON string, a tab, and the
// entry as JSON (engine.Node). A directory's entries follow it together, so a listing reads up
// to the directory and stops after its last entry, and only the lines it prints are decoded.
package catalog

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/holdfast-backup/holdfast/engine"
)

// MaxEntries bounds a catalog: a snapshot of more entries is listed by restic, as without one.
const MaxEntries = 20_000_000

// maxLine bounds a line of a catalog: an entry as restic lists it, twice over (its path again).
const maxLine = 2 << 20

// ErrTooLarge is a snapshot with more than MaxEntries entries: it has no catalog.
var ErrTooLarge = fmt.Errorf("the snapshot has more than %d entries: it is listed by restic", MaxEntries)

var (
	jobName    = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`) })
	snapshotID = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[0-9a-f]{8,64}$`) })
)

// DirIn is the catalogs' directory in holdfast's state directory.
func DirIn(stateDir string) string { return filepath.Join(stateDir, "catalogs") }

// Path is the catalog of a job's snapshot in dir; "" for a name that could not be a file's.
func Path(dir, job, snapshot string) string {
	if !jobName().MatchString(job) || !snapshotID().MatchString(snapshot) {
		return ""
	}
	return filepath.Join(dir, job, snapshot+".gz")
}

// Write makes the catalog of a job's snapshot from list, which hands each entry of the whole
// snapshot to its argument in restic's order (jobunit.Browser.Ls of "/", recursive). A failed
// or too large listing leaves no catalog.
func Write(dir, job, snapshot string, list func(each func(engine.Node) error) error) error {
	file := Path(dir, job, snapshot)
	if file == "" {
		return fmt.Errorf("catalog of %s %s: not a job name and a snapshot id", job, snapshot)
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(file), ".new-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // after the rename, there is nothing by that name
	zw, _ := gzip.NewWriterLevel(tmp, gzip.BestSpeed)
	w := bufio.NewWriterSize(zw, 256<<10)
	var n int
	err = list(func(node engine.Node) error {
		if n++; n > MaxEntries {
			return ErrTooLarge
		}
		return writeLine(w, node)
	})
	for _, step := range []func() error{w.Flush, zw.Close, tmp.Sync, tmp.Close} {
		if err == nil {
			err = step()
		}
	}
	if err != nil {
		tmp.Close()
		return fmt.Errorf("catalog of %s %.8s: %w", job, snapshot, err)
	}
	return os.Rename(tmp.Name(), file)
}

// writeLine writes an entry's line: its path as JSON, a tab, the entry as JSON. A JSON string
// holds no raw tab, and its "/" stay as they are, so a path's prefix is its line's prefix.
func writeLine(w *bufio.Writer, n engine.Node) error {
	p, err := jsonString(n.Path)
	if err != nil {
		return err
	}
	entry, err := json.Marshal(n)
	if err != nil {
		return err
	}
	w.Write(p)
	w.WriteByte('\t')
	w.Write(entry)
	return w.WriteByte('\n')
}

// jsonString is s as a JSON string, without HTML's escapes.
func jsonString(s string) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(s); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// Has reports whether the job's snapshot has a catalog in dir.
func Has(dir, job, snapshot string) bool {
	file := Path(dir, job, snapshot)
	if file == "" {
		return false
	}
	_, err := os.Lstat(file)
	return err == nil
}

// Ls lists a catalogued snapshot as restic's ls does (engine.Restic.Ls): the entry of dir (an
// absolute clean path in the snapshot; "/" has none), then its direct entries or, with
// recursive, everything below it. ok is false when the snapshot has no catalog here: ask restic.
func Ls(dir, job, snapshot, at string, recursive bool, each func(engine.Node) error) (ok bool, err error) {
	file := Path(dir, job, snapshot)
	if file == "" {
		return false, nil
	}
	f, err := openCatalog(file)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer f.Close()
	zr, err := gzip.NewReader(bufio.NewReaderSize(f, 256<<10))
	if err != nil {
		return true, fmt.Errorf("catalog %s: %w", file, err)
	}
	self, err := jsonString(at)
	if err != nil {
		return true, err
	}
	under := append(bytes.Clone(bytes.TrimSuffix(self[:len(self)-1], []byte("/"))), '/') // `"/dir/`
	if at == "/" {
		self = nil
	}
	sc := bufio.NewScanner(zr)
	sc.Buffer(make([]byte, 0, 64<<10), maxLine)
	inside := false
	for sc.Scan() {
		line := sc.Bytes()
		key, entry, found := bytes.Cut(line, []byte{'\t'})
		if !found {
			return true, fmt.Errorf("catalog %s: a line without its path", file)
		}
		switch {
		case self != nil && bytes.Equal(key, self):
		case bytes.HasPrefix(key, under):
			// A direct entry's path has no "/" after dir's (a name's "/" is never escaped).
			if !recursive && bytes.IndexByte(key[len(under):], '/') >= 0 {
				inside = true
				continue
			}
		case inside:
			return true, nil // past dir's entries: no more follow
		default:
			continue
		}
		inside = true
		var n engine.Node
		if err := json.Unmarshal(entry, &n); err != nil {
			return true, fmt.Errorf("catalog %s: %w", file, err)
		}
		if err := each(n); err != nil {
			return true, err
		}
	}
	if err := sc.Err(); err != nil {
		return true, fmt.Errorf("catalog %s: %w", file, err)
	}
	return true, nil
}

// openCatalog opens a catalog for reading without following a link: the directory is root's,
// and a catalog is its file alone.
func openCatalog(file string) (*os.File, error) {
	fd, err := unix.Open(file, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: file, Err: err}
	}
	return os.NewFile(uintptr(fd), file), nil
}

// Prune removes the job's catalogs in dir but those of keep (snapshot ids), and what a write
// that did not finish left.
func Prune(dir, job string, keep []string) error {
	if Path(dir, job, strings.Repeat("0", 8)) == "" {
		return fmt.Errorf("catalogs of %q: not a job name", job)
	}
	entries, err := os.ReadDir(filepath.Join(dir, job))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		id, isCatalog := strings.CutSuffix(e.Name(), ".gz")
		if isCatalog && slices.Contains(keep, id) {
			continue
		}
		if err := os.Remove(filepath.Join(dir, job, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Remove removes every catalog of a job that is gone.
func Remove(dir, job string) error {
	if Path(dir, job, strings.Repeat("0", 8)) == "" {
		return nil
	}
	return os.RemoveAll(filepath.Join(dir, job))
}
