package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
)

// Snapshot is what the repository says about one snapshot.
type Snapshot struct {
	ID       string    `json:"id"`
	ShortID  string    `json:"short_id"`
	Time     time.Time `json:"time"`
	Hostname string    `json:"hostname"`
	Paths    []string  `json:"paths"`
	Tags     []string  `json:"tags"`
	// Summary is what restic 0.17 and later record of the backup that made the snapshot; nil
	// for a snapshot of an older restic.
	Summary *SnapshotSummary `json:"summary,omitempty"`
}

// SnapshotSummary is the part of a snapshot's summary (restic 0.17 and later) that a run's
// figures are made of.
type SnapshotSummary struct {
	BackupStart         time.Time `json:"backup_start"`
	BackupEnd           time.Time `json:"backup_end"`
	DataAdded           int64     `json:"data_added"`
	TotalFilesProcessed int64     `json:"total_files_processed"`
	TotalBytesProcessed int64     `json:"total_bytes_processed"`
}

// ParseSnapshots reads the output of `restic snapshots --json` (without --group-by). Every
// snapshot must have a full id and a time: a listing that lacks them is refused whole, never
// read in part.
func ParseSnapshots(data []byte) ([]Snapshot, error) {
	var raw []struct {
		Snapshot
		Group json.RawMessage `json:"snapshots"` // only in grouped output
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("not the JSON array restic snapshots --json prints: %w", err)
	}
	snaps := make([]Snapshot, len(raw))
	for i, r := range raw {
		switch {
		case r.ID == "" && r.Group != nil:
			return nil, fmt.Errorf("entry %d is a group: list the snapshots without --group-by", i+1)
		case !fullID().MatchString(r.ID):
			return nil, fmt.Errorf("entry %d: id %q is not a full restic id (64 hex digits)", i+1, r.ID)
		case r.Time.IsZero():
			return nil, fmt.Errorf("snapshot %.8s has no time", r.ID)
		}
		snaps[i] = r.Snapshot
	}
	return snaps, nil
}

var fullID = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[0-9a-f]{64}$`) })

// ListSnapshots asks the repository for all its snapshots. It takes no lock, so a prune holding
// the repository does not make it wait or fail; a listing is a moment's view either way.
func (r Restic) ListSnapshots(ctx context.Context, j Job) ([]Snapshot, error) {
	out, err := r.output(ctx, append(r.global(j), "--no-lock", "snapshots", "--json"))
	if err != nil {
		return nil, fmt.Errorf("list snapshots of %s: %w", j.Repository, err)
	}
	snaps, err := ParseSnapshots(out)
	if err != nil {
		return nil, fmt.Errorf("list snapshots of %s: %w", j.Repository, err)
	}
	return snaps, nil
}

// output runs a restic command without a shell and returns its stdout; a failure carries the
// first line restic wrote to stderr, and an answer that skipped a snapshot is one (QueryPartial).
// With r.Run set, that runs it instead.
func (r Restic) output(ctx context.Context, argv []string) ([]byte, error) {
	if r.Run != nil {
		return r.Run(ctx, argv)
	}
	var out []byte
	err := runHere(ctx, argv, func(stdout io.Reader) error {
		var err error
		out, err = io.ReadAll(stdout)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// QueryPartial reads the standard error of a restic query (snapshots, stats) that exited 0, and
// returns an error if restic skipped a snapshot it could not load: restic from 0.16 says
// `Ignoring "ID": failed to load snapshot …` (its cache unwritable, a file unreadable), leaves it
// out and still exits 0, so its answer is not the repository's. nil if it skipped none.
func QueryPartial(stderr []byte) error {
	for _, l := range strings.Split(string(stderr), "\n") {
		l = strings.TrimSpace(escapes().ReplaceAllString(l, ""))
		id, rest, ok := strings.Cut(strings.TrimPrefix(l, `Ignoring "`), `"`)
		if !strings.HasPrefix(l, `Ignoring "`) || !ok {
			continue
		}
		return fmt.Errorf("restic left out snapshot %.8s, which it could not load (%s): its answer is not the whole repository's",
			id, clip(strings.TrimLeft(rest, ":, ")))
	}
	return nil
}

// RunSnapshots is the repair channel: it asks the repository which snapshots carry the run's
// tag, for when the run journal cannot say (lost, quarantined). It runs restic without a shell.
func (r Restic) RunSnapshots(ctx context.Context, j Job, run uuid.UUID) ([]Snapshot, error) {
	out, err := r.output(ctx, r.SnapshotsArgv(j, run))
	if err != nil {
		return nil, fmt.Errorf("restic snapshots for run %s: %w", run, err)
	}
	snaps, err := ParseSnapshots(out)
	if err != nil {
		return nil, fmt.Errorf("restic snapshots for run %s: %w", run, err)
	}
	return snaps, nil
}

// RawDataSize is restic's measure of the data the given snapshots refer to, counted once
// (`restic stats --mode raw-data`). With no snapshot it is 0: restic would count all of them.
func (r Restic) RawDataSize(ctx context.Context, j Job, ids []string) (int64, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	out, err := r.output(ctx, append(append(r.global(j), "--no-lock", "stats", "--json", "--mode", "raw-data"), ids...))
	if err != nil {
		return 0, fmt.Errorf("restic stats of %s: %w", j.Repository, err)
	}
	var stats struct {
		TotalSize *int64 `json:"total_size"`
	}
	if err := json.Unmarshal(out, &stats); err != nil || stats.TotalSize == nil {
		return 0, fmt.Errorf("restic stats of %s: no total_size in %q", j.Repository, firstLine(string(out)))
	}
	return *stats.TotalSize, nil
}

// RestoreSize is what restoring the snapshot (a full id) writes: its files' bytes and their
// number (`restic stats --mode restore-size`), the totals of a restore's progress.
func (r Restic) RestoreSize(ctx context.Context, j Job, id string) (bytes, files int64, err error) {
	out, err := r.output(ctx, append(r.global(j), "--no-lock", "stats", "--json", "--mode", "restore-size", id))
	if err != nil {
		return 0, 0, fmt.Errorf("restic stats of snapshot %.8s: %w", id, err)
	}
	var stats struct {
		TotalSize  *int64 `json:"total_size"`
		TotalFiles *int64 `json:"total_file_count"`
	}
	if err := json.Unmarshal(out, &stats); err != nil || stats.TotalSize == nil || stats.TotalFiles == nil {
		return 0, 0, fmt.Errorf("restic stats of snapshot %.8s: no total_size and total_file_count in %q", id, firstLine(string(out)))
	}
	return *stats.TotalSize, *stats.TotalFiles, nil
}
