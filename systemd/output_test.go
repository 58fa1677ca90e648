package systemd_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/holdfast-backup/holdfast/systemd"
	"github.com/holdfast-backup/holdfast/testenv"
)

// Output runs a command as a unit of its own, under the unit's user and sandbox, and reports its
// output and how it ended; the unit is gone afterwards whatever the outcome.
func TestOutput(t *testing.T) {
	m := testenv.Systemd(t)
	r := connect(t, m)
	dir := testenv.SharedDir(t)
	secret := filepath.Join(dir, "root-only")
	if err := os.WriteFile(secret, []byte("root's"), 0o600); err != nil {
		t.Fatal(err)
	}
	writable := filepath.Join(dir, "rw")
	if err := os.Mkdir(writable, 0o777); err != nil {
		t.Fatal(err)
	}
	sandbox := &systemd.Sandbox{ReadOnlySystem: true, ReadWritePaths: []string{writable}}
	tests := []struct {
		name       string
		argv       []string
		user       string
		max        int64
		wantOut    string
		wantStatus int
		wantErr    error
		wantStderr string
	}{
		{name: "ok", argv: []string{"/bin/echo", "hello"}, wantOut: "hello\n"},
		{name: "exit status", argv: []string{"/bin/sh", "-c", "echo out; echo oops >&2; exit 3"}, wantOut: "out\n", wantStatus: 3, wantStderr: "oops\n"},
		{name: "as the job's user", argv: []string{"/usr/bin/id", "-un"}, user: "nobody", wantOut: "nobody\n"},
		{name: "the user cannot read root's file", argv: []string{"/bin/cat", secret}, user: "nobody", wantStatus: 1},
		{name: "the sandbox is read-only outside its paths", argv: []string{"/bin/sh", "-c", "touch " + filepath.Join(dir, "x") + " || echo refused; touch " + filepath.Join(writable, "y") + " && echo written"}, wantOut: "refused\nwritten\n"},
		{name: "output bounded", argv: []string{"/bin/sh", "-c", "yes | head -c 100000"}, max: 1000, wantErr: systemd.ErrOutputTooLarge},
		{name: "missing program", argv: []string{"/nonexistent/tool"}, wantStatus: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			name := systemd.UnitName("output-test", uuid.New(), 1)
			max := tt.max
			if max == 0 {
				max = 1 << 20
			}
			res, err := r.Output(ctx, systemd.Spec{Name: name, ExecStart: tt.argv, User: tt.user, Sandbox: sandbox}, max)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
			} else {
				if err != nil {
					t.Fatal(err)
				}
				if tt.wantStatus == 0 && res.ExitStatus != 0 {
					t.Fatalf("exit status %d, stderr %q", res.ExitStatus, res.Stderr)
				}
				if tt.wantStatus != 0 && res.ExitStatus == 0 {
					t.Fatalf("exit status 0, want failure %d (stdout %q)", tt.wantStatus, res.Stdout)
				}
				if tt.wantStatus > 1 && res.ExitStatus != tt.wantStatus {
					t.Fatalf("exit status %d, want %d", res.ExitStatus, tt.wantStatus)
				}
				if string(res.Stdout) != tt.wantOut {
					t.Fatalf("stdout %q, want %q", res.Stdout, tt.wantOut)
				}
				if strings.Contains(string(res.Stdout), "root's") {
					t.Fatal("the unit read root's file")
				}
				if tt.wantStderr != "" && string(res.Stderr) != tt.wantStderr {
					t.Fatalf("stderr %q, want %q", res.Stderr, tt.wantStderr)
				}
			}
			testenv.WaitFor(t, "the unit to be gone", func() bool {
				alive, st, err := r.Alive(ctx, name)
				return err == nil && !alive && st.ActiveState != "failed"
			})
		})
	}
}

// The context bounds Output: a command that outlives it is stopped.
func TestOutputStopsAtDeadline(t *testing.T) {
	m := testenv.Systemd(t)
	r := connect(t, m)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	name := systemd.UnitName("output-deadline", uuid.New(), 1)
	// Far longer than the test may take: an Output that waited for the command would hang it.
	_, err := r.Output(ctx, systemd.Spec{Name: name, ExecStart: []string{"/bin/sleep", "1000"}}, 1<<10)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want the deadline", err)
	}
	testenv.WaitFor(t, "the unit to be stopped", func() bool {
		alive, _, err := r.Alive(context.Background(), name)
		return err == nil && !alive
	})
}
