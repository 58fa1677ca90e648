package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// An empty subtree of a live test binary is left alone by another binary's sweep (a booted host
// powered off, or one between its creation and its boot script moving in); one of a binary that
// died is removed.
func TestSweepStaleSparesLiveBinaries(t *testing.T) {
	v1, v2, err := cgroupHierarchies()
	if err != nil {
		unavailable(t, "cgroups: %v", err)
		return
	}
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	subtree := func(pid int) *cgroupSubtree {
		name := fmt.Sprintf("%s%d-%s.slice", subtreePrefix, pid, randomHex(6))
		if owner, ok := subtreeOwner(name); !ok || owner != pid {
			t.Fatalf("subtreeOwner(%s) = %d, %v", name, owner, ok)
		}
		cg := &cgroupSubtree{}
		for _, h := range v1 {
			cg.dirs = append(cg.dirs, filepath.Join(h, name))
		}
		if v2 != "" {
			cg.dirs = append(cg.dirs, filepath.Join(v2, name))
		}
		if err := cg.create(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cg.tryRemove() })
		return cg
	}
	live, gone := subtree(os.Getpid()), subtree(dead.Process.Pid)
	sweepStale(v1, v2)
	for _, d := range live.dirs {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("the live binary's empty subtree %s was swept: %v", d, err)
		}
	}
	for _, d := range gone.dirs {
		if _, err := os.Stat(d); err == nil {
			t.Errorf("the dead binary's subtree %s is still there", d)
		}
	}
	for _, name := range []string{"holdfast-testenv-3f2a9c.slice", "holdfast-testenv-x-1.slice", "other-1-a.slice"} {
		if _, ok := subtreeOwner(name); ok {
			t.Errorf("subtreeOwner(%s) found an owner", name)
		}
	}
}
