package reconcile

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"sync"

	"github.com/holdfast-backup/holdfast/engine"
	"github.com/holdfast-backup/holdfast/model"
)

// The snapshot id of a backup's summary comes through the journal, which the job's user can
// write: only what restic prints for a snapshot is taken for one, 8 (restic 0.14's short id) to
// 64 hex digits. Anything else is no snapshot id, said in the run's reason with at most its
// first snapshotIDShown bytes, quoted; the stored summary keeps at most storedIDBytes of it.
var snapshotIDForm = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[0-9a-f]{8,64}$`) })

const (
	snapshotIDShown = 16
	storedIDBytes   = 80 // past 64: a clipped id that was not valid is not made valid
	maxSummary      = 4 << 10
)

// validSnapshotID reports whether id has the form of a restic snapshot id.
func validSnapshotID(id string) bool { return snapshotIDForm().MatchString(id) }

// storedSummary is the summary event's payload as the attempt keeps it: as the engine wrote it
// when it is small and its snapshot id valid; else what holdfast reads of it (engine.Summary),
// with the id clipped; nil for an unreadable one larger than maxSummary.
func storedSummary(payload json.RawMessage) json.RawMessage {
	var s engine.Summary
	if err := json.Unmarshal(payload, &s); err != nil {
		if len(payload) > maxSummary {
			return nil
		}
		return payload
	}
	if len(payload) <= maxSummary && (s.SnapshotID == "" || validSnapshotID(s.SnapshotID)) {
		return payload
	}
	s.SnapshotID = clipText(s.SnapshotID, storedIDBytes)
	out, err := json.Marshal(s)
	if err != nil {
		return nil
	}
	return out
}

// checkedSummary is the attempt's summary with a snapshot id that is not restic's taken out, and
// then a note for the run's reason saying so; nil if it recorded none (or none readable).
func checkedSummary(a model.Attempt) (*engine.Summary, string) {
	if len(a.Summary) == 0 {
		return nil, ""
	}
	var s engine.Summary
	if err := json.Unmarshal(a.Summary, &s); err != nil {
		return nil, ""
	}
	if s.SnapshotID == "" || validSnapshotID(s.SnapshotID) {
		return &s, ""
	}
	note := fmt.Sprintf("; the journal's summary named as its snapshot %q, which is not 8 to 64 hex digits: no snapshot id recorded",
		clipText(s.SnapshotID, snapshotIDShown))
	s.SnapshotID = ""
	return &s, note
}

// findSnapshot is the snapshot of snaps that id names: its full id, or the start of exactly one
// (a short id as restic 0.14's summary gives), id being of restic's form.
func findSnapshot(snaps []engine.Snapshot, id string) (*engine.Snapshot, error) {
	if !validSnapshotID(id) {
		return nil, fmt.Errorf("the run's snapshot id %q is not 8 to 64 hex digits", clipText(id, snapshotIDShown))
	}
	var made *engine.Snapshot
	for i := range snaps {
		if !strings.HasPrefix(snaps[i].ID, id) {
			continue
		}
		if made != nil && made.ID != snaps[i].ID {
			return nil, fmt.Errorf("snapshot id %s is the start of more than one snapshot of the repository", id)
		}
		made = &snaps[i]
	}
	if made == nil {
		return nil, fmt.Errorf("snapshot %s is no longer in the repository", id)
	}
	return made, nil
}
