package fssnap

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/google/uuid"

	"github.com/holdfast-backup/holdfast/safepath"
	"github.com/holdfast-backup/holdfast/systemd"
)

// Runner runs a unit once and hands its standard output over (systemd.Client.Stream; the
// daemon's jobunit.Runner).
type Runner interface {
	Stream(ctx context.Context, s systemd.Spec, consume func(stdout io.Reader) error) (systemd.Result, error)
}

// Helper runs Take and Release in a transient unit of their own, as root outside any sandbox,
// and reads their Answer: the daemon's own service is read-only outside its state directory and
// holds no CAP_SYS_ADMIN, which making, naming and removing snapshots need.
type Helper struct {
	Runner Runner
	// Binary is the holdfast executable the unit runs (its hidden fs-snapshot-take and
	// fs-snapshot-release commands, package unitcmd).
	Binary string
}

// Answer is what the helper's unit prints: the bind mounts taken, or why not.
type Answer struct {
	Binds   []systemd.Bind  `json:"binds,omitempty"`
	Fresh   bool            `json:"fresh,omitempty"`
	Refused *safepath.Error `json:"refused,omitempty"`
	Error   string          `json:"error,omitempty"`
}

// AnswerOf is the Answer to a Take or Release that returned t and err.
func AnswerOf(t Taken, err error) Answer {
	var se *safepath.Error
	switch {
	case errors.As(err, &se):
		return Answer{Refused: se}
	case err != nil:
		return Answer{Error: err.Error()}
	}
	return Answer{Binds: t.Binds, Fresh: t.Fresh}
}

// Take is Take, in the helper's unit.
func (h Helper) Take(ctx context.Context, records, key string, paths, writes []string) (Taken, error) {
	argv := []string{h.Binary, "fs-snapshot-take", "--records", records, "--key", key}
	for _, p := range paths {
		argv = append(argv, "--path", p)
	}
	for _, w := range writes {
		argv = append(argv, "--write", w)
	}
	a, err := h.run(ctx, "take", argv)
	if err != nil {
		return Taken{}, err
	}
	// Take mounts each path: an answer without them (another binary's) would have the backup
	// read the live paths.
	if len(a.Binds) != len(paths) {
		return Taken{}, fmt.Errorf("take Btrfs snapshots: the helper answered %d bind mounts for %d paths", len(a.Binds), len(paths))
	}
	return Taken{Binds: a.Binds, Fresh: a.Fresh}, nil
}

// Release is Release, in the helper's unit.
func (h Helper) Release(ctx context.Context, records, key string) error {
	_, err := h.run(ctx, "release", []string{h.Binary, "fs-snapshot-release", "--records", records, "--key", key})
	return err
}

// maxAnswer bounds the helper's answer: a bind mount per path of a job.
const maxAnswer = 1 << 20

func (h Helper) run(ctx context.Context, what string, argv []string) (Answer, error) {
	if h.Runner == nil || h.Binary == "" {
		return Answer{}, errors.New("no systemd manager to run the Btrfs snapshot helper in")
	}
	spec := systemd.Spec{Name: "holdfast-fs-snapshot-" + uuid.NewString() + ".service",
		Description: "holdfast: " + what + " Btrfs snapshots", ExecStart: argv, SyslogIdentifier: "holdfast"}
	var out []byte
	res, err := h.Runner.Stream(ctx, spec, func(stdout io.Reader) error {
		var err error
		out, err = systemd.ReadAtMost(stdout, maxAnswer)
		return err
	})
	if err != nil {
		return Answer{}, fmt.Errorf("%s Btrfs snapshots: %w", what, err)
	}
	var a Answer
	if err := json.Unmarshal(out, &a); err != nil || res.ExitStatus != 0 || res.Killed {
		return Answer{}, fmt.Errorf("%s Btrfs snapshots: the helper exited %d without an answer: %s", what, res.ExitStatus, strings.TrimSpace(string(res.Stderr)))
	}
	switch {
	case a.Refused != nil:
		return Answer{}, a.Refused
	case a.Error != "":
		return Answer{}, errors.New(a.Error)
	}
	return a, nil
}
