package unitcmd

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/holdfast-backup/holdfast/engine"
	"github.com/holdfast-backup/holdfast/putback"
	"github.com/holdfast-backup/holdfast/safepath"
	"golang.org/x/sys/unix"
)

// maxPutBackErrors bounds the item errors a putting back reports: the rest are counted.
const maxPutBackErrors = 1000

// stagedRestore is a restore to the original paths as holdfast exec carries it out: restic
// restores into stage, in base, and the paths are put back from there (putback).
type stagedRestore struct {
	base, stage string
	paths       []string
	overwrite   bool
	made        unix.Stat_t // the stage prepare made
}

// prepare checks the stage's directory again, as the unit finds it (the spawn checked it was
// the one admitted), and gives restic an empty stage: what an earlier attempt left is cleared.
func (s *stagedRestore) prepare() error {
	if filepath.Dir(s.stage) != s.base {
		return fmt.Errorf("the stage %s is not in %s", s.stage, s.base)
	}
	n, err := safepath.Writable(s.base, os.Getuid())
	if err != nil {
		return fmt.Errorf("the stage's directory: %w", err)
	}
	if n.Mode&0o022 != 0 {
		// Whoever else may write it could swap the stage while restic writes into it.
		return fmt.Errorf("the stage's directory %s has mode %04o: others may write it", s.base, n.Mode&0o7777)
	}
	if err := os.RemoveAll(s.stage); err != nil {
		return fmt.Errorf("clear the stage an earlier attempt left: %w", err)
	}
	if err := os.Mkdir(s.stage, 0o700); err != nil {
		return err
	}
	return unix.Lstat(s.stage, &s.made)
}

// remove removes the stage, with what was not put back in it.
func (s *stagedRestore) remove(stderr io.Writer) {
	if err := os.RemoveAll(s.stage); err != nil {
		fmt.Fprintf(stderr, "holdfast exec: the restore's stage %s was left: %v\n", s.stage, err)
	}
}

// putBack puts the paths back (engine.Restore.PutBack): an item error for each entry kept or not
// put back, a warning with the counts, and status 1 if one failed, 3 if one was kept.
func (s *stagedRestore) putBack(stderr io.Writer) ([]engine.Event, int) {
	var evs []engine.Event
	counts := map[putback.Action]int{}
	cfg := putback.Config{Base: s.base, Stage: s.stage, Paths: s.paths, Overwrite: s.overwrite, StageDev: s.made.Dev, StageIno: s.made.Ino}
	err := putback.Run(cfg, func(e putback.Entry) {
		counts[e.Action]++
		if e.Action != putback.Kept && e.Action != putback.Failed {
			return
		}
		msg := string(e.Action) + ": " + e.Why
		fmt.Fprintf(stderr, "holdfast: %s %s\n", e.Path, msg)
		if counts[putback.Kept]+counts[putback.Failed] <= maxPutBackErrors {
			evs = append(evs, engine.Event{Type: engine.TypeItemError, Payload: engine.ItemError{Item: e.Path, During: "put back", Message: msg}})
		}
	})
	if err != nil {
		msg := "the restored entries were not put back: " + err.Error()
		fmt.Fprintf(stderr, "holdfast: %s\n", msg)
		return append(evs, engine.Event{Type: engine.TypeFatal, Payload: engine.Fatal{Message: msg}}), 1
	}
	msg := fmt.Sprintf("put back at their paths: %d entries placed, %d replaced, %d as the snapshot has them, %d kept (changed since the snapshot), %d failed",
		counts[putback.Placed], counts[putback.Replaced], counts[putback.Same], counts[putback.Kept], counts[putback.Failed])
	fmt.Fprintf(stderr, "holdfast: %s\n", msg)
	evs = append(evs, engine.Event{Type: engine.TypeWarning, Payload: engine.Warning{Message: msg}})
	if n := counts[putback.Kept] + counts[putback.Failed]; n > maxPutBackErrors {
		evs = append(evs, engine.Event{Type: engine.TypeWarning, Payload: engine.Warning{Message: fmt.Sprintf(
			"%d more entries kept or not put back: they are in the unit's log", n-maxPutBackErrors)}})
	}
	switch {
	case counts[putback.Failed] > 0:
		return evs, 1
	case counts[putback.Kept] > 0:
		return evs, 3
	}
	return evs, 0
}
