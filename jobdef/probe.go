package jobdef

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/holdfast-backup/holdfast/safepath"
)

// ProbeAs is a Probe that checks paths as a job's identity: it runs argv (holdfast's own
// `probe-read`, which answers with Readable) with that identity's credentials, so the kernel
// decides with the user's permissions and root never opens the user's paths. When the process
// already runs as that user, it checks in-process.
func ProbeAs(argv []string) Probe {
	return func(id Identity, want []Access) ([]string, error) { return probeAs(argv, id, want) }
}

func probeAs(argv []string, id Identity, want []Access) ([]string, error) {
	if uint32(os.Geteuid()) == id.UID {
		return Readable(want), nil
	}
	var why []string
	if err := runAs(argv, id, want, &why); err != nil {
		return nil, err
	}
	if len(why) != len(want) {
		return nil, fmt.Errorf("probe as user %s: %d answers for %d paths", id, len(why), len(want))
	}
	return why, nil
}

// runAs runs argv with id's credentials, in as its standard input (JSON), and decodes its
// answer (JSON) into out.
func runAs(argv []string, id Identity, in, out any) error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("only root can check files as user %s: run holdfast as root", id)
	}
	req, err := json.Marshal(in)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir, cmd.Env = "/", []string{}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: id.UID, Gid: id.GID, Groups: id.Groups}}
	cmd.Stdin = bytes.NewReader(req)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("probe as user %s: %w: %s", id, err, bytes.TrimSpace(stderr.Bytes()))
	}
	if err := json.Unmarshal(stdout.Bytes(), out); err != nil {
		return fmt.Errorf("probe as user %s: unexpected answer %q", id, stdout.Bytes())
	}
	return nil
}

// Readable checks, with this process's own credentials, that each path can be read as a
// backup reads it: "" if it can, else why not.
func Readable(want []Access) []string {
	why := make([]string, len(want))
	for i, w := range want {
		why[i] = readable(w)
	}
	return why
}

// readable says why the process cannot read w, or "". It never blocks on a FIFO (O_NONBLOCK)
// and never acquires a terminal (O_NOCTTY).
func readable(w Access) string {
	info, err := os.Lstat(w.Path)
	if err != nil {
		return safepath.Cause(err)
	}
	if !w.Regular && info.Mode()&os.ModeSymlink != 0 {
		return "" // restic stores the link itself
	}
	if w.Exec {
		// A program is executed, not read: one mode 0711 is fine.
		if info, err = os.Stat(w.Path); err != nil {
			return safepath.Cause(err)
		}
		if !info.Mode().IsRegular() {
			return "it is not a regular file"
		}
		if syscall.Access(w.Path, 1) != nil { // X_OK, as the real (the job's) user
			return "it cannot be executed (no execute permission)"
		}
		return ""
	}
	fd, err := syscall.Open(w.Path, syscall.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return safepath.Cause(err)
	}
	f := os.NewFile(uintptr(fd), w.Path)
	defer f.Close()
	info, err = f.Stat()
	if err != nil {
		return safepath.Cause(err)
	}
	switch {
	case w.Regular && !info.Mode().IsRegular():
		return "it is not a regular file"
	case info.IsDir():
		if _, err := f.Readdirnames(1); err != nil && !errors.Is(err, io.EOF) {
			return safepath.Cause(err)
		}
	case info.Mode().IsRegular():
		if _, err := f.Read(make([]byte, 1)); err != nil && !errors.Is(err, io.EOF) {
			return safepath.Cause(err)
		}
	}
	return ""
}
