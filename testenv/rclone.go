package testenv

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// RcloneRestic serves the restic repository in dir over restic's REST protocol with rclone
// (`rclone serve restic`, Debian's rclone), append-only if asked, until the test ends, and
// returns its location for restic (rest:http://ADDR/). An append-only server refuses to delete
// anything but locks.
func RcloneRestic(t testing.TB, dir string, appendOnly bool) string {
	t.Helper()
	bin := installedFrom(t, "rclone", "rclone")
	addr := FreeAddr(t)
	args := []string{"serve", "restic", "--addr", addr, "--config", filepath.Join(t.TempDir(), "rclone.conf")}
	if appendOnly {
		args = append(args, "--append-only")
	}
	log, err := os.Create(filepath.Join(t.TempDir(), "rclone.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, append(args, dir)...)
	cmd.Stdout, cmd.Stderr = log, log
	c, err := startChild(cmd, syscall.SIGKILL)
	if err != nil {
		t.Fatalf("start rclone serve restic: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		c.wait(10 * time.Second)
		_ = log.Close()
	})
	listening := Eventually(30*time.Second, func() bool {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			_ = conn.Close()
		}
		return err == nil
	})
	if !listening {
		out, _ := os.ReadFile(log.Name())
		t.Fatalf("rclone serve restic on %s: not listening after 30s:\n%s", addr, out)
	}
	return "rest:http://" + addr + "/"
}
