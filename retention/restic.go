package retention

import (
	"fmt"

	"github.com/holdfast-backup/holdfast/engine"
)

// ParseResticSnapshots reads the output of `restic snapshots --json` (without --group-by): it
// fills ID, Time, Host, Tags and Paths of each snapshot.
func ParseResticSnapshots(data []byte) ([]Snapshot, error) {
	listed, err := engine.ParseSnapshots(data)
	if err != nil {
		return nil, fmt.Errorf("read restic snapshots: %w", err)
	}
	snaps := make([]Snapshot, len(listed))
	for i, l := range listed {
		snaps[i] = Snapshot{ID: l.ID, Time: l.Time, Host: l.Hostname, Tags: l.Tags, Paths: l.Paths}
	}
	return snaps, nil
}
