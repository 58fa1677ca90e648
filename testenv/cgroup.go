package testenv

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// A private manager gets a cgroup subtree of its own in every hierarchy
// and takes it as its root. At the cgroup root, managers share app.slice:
// one removes it when its last unit is gone while another is about to
// attach a unit to it (status 219/CGROUP), and the first manager moves every
// process of the host's root cgroup into its init.scope. The subtree is
// named like a slice because journald derives _SYSTEMD_UNIT from the cgroup
// path and skips leading slices only.

// cgroupSubtree is one manager's subtree.
type cgroupSubtree struct {
	dirs    []string // the subtree's directory in each hierarchy
	unified string   // the cgroup v2 directory, "" without cgroup v2
}

// cgroupHierarchies returns the mount points of the cgroup hierarchies.
// cpuset is left out: a new cpuset cgroup has no CPUs, so nothing can join
// it before it is configured.
func cgroupHierarchies() (v1 []string, v2 string, err error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// 40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		pf, qf := strings.Fields(pre), strings.Fields(post)
		if len(pf) < 5 || len(qf) < 3 {
			continue
		}
		mnt := unescapeMountinfo(pf[4])
		switch qf[0] {
		case "cgroup2":
			v2 = mnt
		case "cgroup":
			if !hasOption(qf[2], "cpuset") {
				v1 = append(v1, mnt)
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, "", err
	}
	if len(v1) == 0 && v2 == "" {
		return nil, "", errors.New("no cgroup hierarchy mounted")
	}
	return v1, v2, nil
}

func hasOption(opts, opt string) bool {
	for _, o := range strings.Split(opts, ",") {
		if o == opt {
			return true
		}
	}
	return false
}

// unescapeMountinfo undoes the octal escapes (\040 for space) of mountinfo.
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

const subtreePrefix = "holdfast-testenv-"

var sweepOnce sync.Once

func newCgroupSubtree() (*cgroupSubtree, error) {
	v1, v2, err := cgroupHierarchies()
	if err != nil {
		return nil, err
	}
	sweepOnce.Do(func() { sweepStale(v1, v2) })
	// The test binary's pid in the name: sweepStale leaves the subtrees of live binaries alone.
	name := fmt.Sprintf("%s%d-%s.slice", subtreePrefix, os.Getpid(), randomHex(6))
	cg := &cgroupSubtree{}
	for _, h := range v1 {
		cg.dirs = append(cg.dirs, filepath.Join(h, name))
	}
	if v2 != "" {
		cg.unified = filepath.Join(v2, name)
		cg.dirs = append(cg.dirs, cg.unified)
	}
	return cg, nil
}

// create makes the subtree's directories; the manager script moves itself
// into them.
func (cg *cgroupSubtree) create() error {
	for _, d := range cg.dirs {
		if err := os.Mkdir(d, 0o755); err != nil {
			return fmt.Errorf("create cgroup: %w", err)
		}
	}
	return nil
}

// kill SIGKILLs every process in the subtree, if the kernel can (cgroup v2
// cgroup.kill, Linux 5.14). It reports whether it could.
func (cg *cgroupSubtree) kill() bool {
	if cg.unified == "" {
		return false
	}
	return os.WriteFile(filepath.Join(cg.unified, "cgroup.kill"), []byte("1"), 0) == nil
}

// pids returns the live processes in the subtree.
func (cg *cgroupSubtree) pids() []int {
	seen := make(map[int]bool)
	var out []int
	for _, d := range cg.dirs {
		filepath.WalkDir(d, func(path string, e fs.DirEntry, err error) error {
			if err != nil || e.IsDir() || e.Name() != "cgroup.procs" {
				return nil
			}
			b, _ := os.ReadFile(path)
			for _, f := range strings.Fields(string(b)) {
				pid, err := strconv.Atoi(f)
				if err == nil && !seen[pid] && ProcessAlive(pid) {
					seen[pid] = true
					out = append(out, pid)
				}
			}
			return nil
		})
	}
	return out
}

// remove deletes the subtree, waiting up to d for its processes to go.
func (cg *cgroupSubtree) remove(d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		err := cg.tryRemove()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (cg *cgroupSubtree) tryRemove() error {
	var errs []error
	for _, d := range cg.dirs {
		var sub []string
		filepath.WalkDir(d, func(path string, e fs.DirEntry, err error) error {
			if err == nil && e.IsDir() {
				sub = append(sub, path)
			}
			return nil
		})
		// Children first. cgroupfs directories go with rmdir only.
		for i := len(sub) - 1; i >= 0; i-- {
			if err := syscall.Rmdir(sub[i]); err != nil && !errors.Is(err, syscall.ENOENT) {
				errs = append(errs, fmt.Errorf("remove cgroup %s: %w", sub[i], err))
				break
			}
		}
	}
	return errors.Join(errs...)
}

// sweepStale removes the subtrees of managers whose test binary died
// without cleaning up: the binary's pid is in the name, and a subtree of a
// live binary is never touched, though it may be empty for a while (a booted
// host powered off and not yet booted again, or one between its creation and
// its script moving in; another test binary sweeping then removed it from
// under its boot). A subtree named without a pid is swept by age.
func sweepStale(v1 []string, v2 string) {
	hs := v1
	if v2 != "" {
		hs = append(hs, v2)
	}
	names := make(map[string]bool)
	for _, h := range hs {
		ents, _ := filepath.Glob(filepath.Join(h, subtreePrefix+"*.slice"))
		for _, e := range ents {
			if owner, ok := subtreeOwner(filepath.Base(e)); ok {
				if !ProcessAlive(owner) {
					names[filepath.Base(e)] = true
				}
			} else if fi, err := os.Stat(e); err == nil && time.Since(fi.ModTime()) > time.Minute {
				names[filepath.Base(e)] = true
			}
		}
	}
	for name := range names {
		cg := &cgroupSubtree{}
		for _, h := range hs {
			cg.dirs = append(cg.dirs, filepath.Join(h, name))
		}
		if len(cg.pids()) == 0 {
			cg.tryRemove()
		}
	}
}

// subtreeOwner is the pid of the test binary that named the subtree
// (holdfast-testenv-<pid>-<random>.slice); false for a name without one.
func subtreeOwner(name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, subtreePrefix)
	if !ok {
		return 0, false
	}
	pid, _, ok := strings.Cut(rest, "-")
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(pid)
	return n, err == nil && n > 0
}
