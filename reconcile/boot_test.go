package reconcile

import (
	"io"
	"log/slog"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/store"
	"github.com/holdfast-backup/holdfast/store/storetest"
	"github.com/holdfast-backup/holdfast/systemd"
)

// A unit claimed in an earlier boot of the same host is gone for good: its run restarts at once
// instead of waiting out the spawn grace. The boot recorded with the claim is compared only
// with the same host's.
func TestEarlierBootSkipsSpawnGrace(t *testing.T) {
	t.Parallel()
	b := storetest.Setup(t)
	st, ctx := b.Store, b.Ctx
	run := storetest.Run(t, st, &storetest.RunOpts{JobOpts: &storetest.JobOpts{Name: "boot", Engine: "command"}})
	unit := systemd.UnitName("boot", run.ID, 1)
	if ok, _, err := st.AttemptClaimSpawn(ctx, model.Lease{Host: "h"}, model.SpawnClaim{Attempt: model.AttemptRef{Run: run.ID, No: 1}, Unit: unit, Boot: "boot-1"}); !ok || err != nil {
		t.Fatalf("claim: %v, %v", ok, err)
	}
	ls, err := st.RunListLive(ctx, "")
	if err != nil || len(ls) != 1 {
		t.Fatalf("live runs: %+v, %v", ls, err)
	}
	if got := ls[0].Attempt.BootID; got != "boot-1" {
		t.Fatalf("the attempt's boot: %q, want boot-1", got)
	}
	gone := map[string]systemd.State{unit: {LoadState: "not-found", ActiveState: "inactive", SubState: "dead"}}

	for _, tc := range []struct {
		name, host, boot string
		row              string
	}{
		{"same boot: systemd may not have got to it yet", "h", "boot-1", "gone, within spawn grace"},
		{"the host rebooted since the claim", "h", "boot-2", "gone"},
		{"another host's boot says nothing of this one", "other", "boot-2", "gone, within spawn grace"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &Reconciler{cfg: Config{Store: st, StateDir: t.TempDir(), SpawnGrace: time.Hour, MaxAttempts: 5,
				Host: tc.host, BootID: tc.boot, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), now: time.Now}}
			l := ls[0]
			f, _, err := r.gather(ctx, &l, &passReads{states: gone})
			if err != nil {
				t.Fatal(err)
			}
			if d := decide(f, r.rules()); d.row != tc.row {
				t.Fatalf("row %q, want %q", d.row, tc.row)
			}
		})
	}
}

// The default boot id is the kernel's and its PID 1's start, the same for every reconciler of
// one boot.
func TestBootIDDefault(t *testing.T) {
	c := Config{Store: &store.Store{}, Runner: &systemd.Client{}, StateDir: t.TempDir(), Binary: "/bin/true"}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	kernel, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^` + strings.TrimSpace(string(kernel)) + `\+[0-9]+$`).MatchString(c.BootID) {
		t.Fatalf("boot id %q, want the kernel's, + and PID 1's start", c.BootID)
	}
	if again, err := CurrentBoot(); err != nil || again != c.BootID {
		t.Fatalf("boot id read again: %q, %v; want %q", again, err, c.BootID)
	}
}
