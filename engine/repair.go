package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"time"

	"github.com/google/uuid"
)

// Snapshot is what the repository says about one snapshot.
type Snapshot struct {
	ID      string    `json:"id"`
	ShortID string    `json:"short_id"`
	Time    time.Time `json:"time"`
	Paths   []string  `json:"paths"`
	Tags    []string  `json:"tags"`
}

// RunSnapshots is the repair channel: it asks the repository which snapshots carry the run's
// tag, for when the run journal cannot say (lost, quarantined). It runs restic without a shell.
func (r Restic) RunSnapshots(ctx context.Context, j Job, run uuid.UUID) ([]Snapshot, error) {
	argv := r.SnapshotsArgv(j, run)
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("restic snapshots for run %s: %w: %s", run, err, firstLine(strings.TrimSpace(stderr.String())))
	}
	var snaps []Snapshot
	if err := json.Unmarshal(stdout.Bytes(), &snaps); err != nil {
		return nil, fmt.Errorf("restic snapshots for run %s: read its JSON: %w", run, err)
	}
	return snaps, nil
}
