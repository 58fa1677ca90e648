package reconcile

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/holdfast-backup/holdfast/engine"
	"github.com/holdfast-backup/holdfast/model"
)

// The snapshot id of a journal's summary is taken only in restic's form, 8 to 64 hex digits;
// anything else is no snapshot id: the summary's figures stay, the stored summary is bounded,
// and the run's reason says so with at most 16 bytes of it, quoted, never the whole.
func TestSummarySnapshotID(t *testing.T) {
	full := strings.Repeat("0123456789abcdef", 4)
	for _, tc := range []struct {
		name, id string
		valid    bool
	}{
		{"restic 0.14's short id", "4b925b96", true},
		{"a full id", full, true},
		{"none", "", true}, // no id: nothing to say about it
		{"one character", "a", false},
		{"seven digits", "4b925b9", false},
		{"65 digits", full + "0", false},
		{"upper case", "4B925B96", false},
		{"not hex", "4b925b9g", false},
		{"a newline after it", "4b925b96\n", false},
		{"a terminal escape", "\x1b[31m4b925b96", false},
		{"1 MiB of text", strings.Repeat("z", 1<<20-200), false},
		{"1 MiB of hex", strings.Repeat("a", 1<<20-200), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.id != "" && validSnapshotID(tc.id) != tc.valid {
				t.Fatalf("validSnapshotID = %v, want %v", !tc.valid, tc.valid)
			}
			payload, _ := json.Marshal(engine.Summary{SnapshotID: tc.id, DataAdded: 42, TotalFilesProcessed: 3})
			stored := storedSummary(payload)
			if len(stored) > maxSummary {
				t.Fatalf("the attempt keeps a summary of %d bytes, want at most %d", len(stored), maxSummary)
			}
			s, note := checkedSummary(model.Attempt{Summary: stored})
			if s == nil || s.DataAdded != 42 || s.TotalFilesProcessed != 3 {
				t.Fatalf("summary %+v; want its figures kept", s)
			}
			reason := engine.Restic{}.Classify(engine.Evidence{ExitStatus: 0, Summary: s}).Reason + note
			partial := engine.Restic{}.Classify(engine.Evidence{ExitStatus: 3, Summary: s, ItemErrors: 1}).Reason + note
			if tc.valid {
				if s.SnapshotID != tc.id || note != "" || !strings.Contains(reason, "snapshot "+tc.id) {
					t.Fatalf("id %q, note %q, reason %q; want the id taken as it is", s.SnapshotID, note, reason)
				}
				if tc.id != "" && string(stored) != string(payload) {
					t.Fatalf("stored %s, want the engine's own %s", stored, payload)
				}
				return
			}
			if s.SnapshotID != "" {
				t.Fatalf("id %q taken, want none", s.SnapshotID)
			}
			for _, r := range []string{reason, partial} {
				if !strings.Contains(r, "not 8 to 64 hex digits: no snapshot id recorded") || !strings.Contains(r, "snapshot of no recorded id") {
					t.Fatalf("reason %q; want it to say the id was not taken", r)
				}
				if len(r) > 300 || strings.ContainsAny(r, "\x1b\n") || (len(tc.id) > snapshotIDShown && strings.Contains(r, tc.id[:snapshotIDShown+1])) {
					t.Fatalf("reason %q (%d bytes) echoes the id past %d bytes or unescaped", r, len(r), snapshotIDShown)
				}
			}
		})
	}
}

// The ledger's repair finds the run's snapshot by its id: a full id, or the start of exactly
// one snapshot; never by an id of another form (one character would match any), nor by the
// start of two.
func TestFindSnapshot(t *testing.T) {
	a := "4b925b96" + strings.Repeat("a", 56)
	b := "4b925b96" + strings.Repeat("b", 56)
	c := "77ccdd00" + strings.Repeat("c", 56)
	snaps := []engine.Snapshot{{ID: a}, {ID: b}, {ID: c}}
	for _, tc := range []struct {
		id, want, fail string
	}{
		{c, c, ""},
		{"77ccdd00", c, ""},
		{a, a, ""},
		{"4b925b96a", a, ""},
		{"4b925b96", "", "more than one snapshot"},
		{"4", "", "not 8 to 64 hex digits"},
		{"", "", "not 8 to 64 hex digits"},
		{"%", "", "not 8 to 64 hex digits"},
		{strings.Repeat("7", 1<<20), "", "not 8 to 64 hex digits"},
		{"deadbeef", "", "no longer in the repository"},
	} {
		got, err := findSnapshot(snaps, tc.id)
		switch {
		case tc.fail == "" && (err != nil || got.ID != tc.want):
			t.Errorf("findSnapshot(%.20q) = %v, %v; want %s", tc.id, got, err, tc.want)
		case tc.fail != "" && (err == nil || !strings.Contains(err.Error(), tc.fail) || len(err.Error()) > 200):
			t.Errorf("findSnapshot(%.20q) = %v, %.300v; want a short error saying %q", tc.id, got, err, tc.fail)
		}
	}
}
