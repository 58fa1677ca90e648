package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// btrfsSize is the sparse file behind each Btrfs: mkfs.btrfs's smallest with metadata in two
// copies is about 110 MiB.
const btrfsSize = 256 << 20

// Btrfs mounts a new, empty Btrfs file system on a loop device over a sparse file and returns
// its mount point, the root of its top-level subvolume (root's, mode 0755, under a directory
// units running as nobody can traverse). It is unmounted and its device detached at t.Cleanup.
// A systemd manager sees it only if started after it: a manager's mount namespace is private
// (PrivateSystemd, not SharedSystemd). Without root, mkfs.btrfs or loop devices the test is
// skipped (fails under CI=true); scripts/install-deps installs btrfs-progs.
func Btrfs(t testing.TB) string {
	t.Helper()
	if os.Geteuid() != 0 {
		unavailable(t, "a Btrfs file system on a loop device needs root")
	}
	tools := map[string]string{}
	for tool, pkg := range map[string]string{"mkfs.btrfs": "btrfs-progs", "btrfs": "btrfs-progs", "losetup": "mount", "mount": "mount", "umount": "mount"} {
		tools[tool] = installedFrom(t, tool, pkg)
	}
	dir, err := mkdirShared("", "holdfast-btrfs-*")
	if err != nil {
		t.Fatalf("testenv: btrfs: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	image := filepath.Join(dir, "image")
	f, err := os.Create(image)
	if err == nil {
		err = f.Truncate(btrfsSize)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		t.Fatalf("testenv: btrfs image: %v", err)
	}
	run := func(argv ...string) string {
		t.Helper()
		out, err := exec.Command(tools[argv[0]], argv[1:]...).CombinedOutput()
		if err != nil {
			t.Fatalf("testenv: %s: %v\n%s", strings.Join(argv, " "), err, out)
		}
		return strings.TrimSpace(string(out))
	}
	run("mkfs.btrfs", "-q", image)
	dev := run("losetup", "--find", "--show", image)
	t.Cleanup(func() {
		// A busy device (a namespace that still holds the mount) is detached once it is free.
		if out, err := exec.Command(tools["losetup"], "--detach", dev).CombinedOutput(); err != nil {
			t.Logf("testenv: losetup --detach %s: %v: %s", dev, err, out)
		}
	})
	mnt := filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	run("mount", "-t", "btrfs", dev, mnt)
	t.Cleanup(func() {
		// Units and managers may still be leaving their namespaces: retried, then detached lazily.
		for range 20 {
			if exec.Command(tools["umount"], mnt).Run() == nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		if out, err := exec.Command(tools["umount"], "--lazy", mnt).CombinedOutput(); err != nil {
			t.Errorf("testenv: umount %s: %v: %s", mnt, err, out)
		}
	})
	if err := os.Chmod(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	return mnt
}

// BtrfsSubvolume creates a subvolume at path, on a Btrfs file system (root's, mode 0755).
func BtrfsSubvolume(t testing.TB, path string) {
	t.Helper()
	if out, err := exec.Command(installedFrom(t, "btrfs", "btrfs-progs"), "subvolume", "create", path).CombinedOutput(); err != nil {
		t.Fatalf("testenv: btrfs subvolume create %s: %v\n%s", path, err, out)
	}
}
