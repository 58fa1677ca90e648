package engine

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/holdfast-backup/holdfast/setting"
)

// ResticVersion is a restic release, as `restic version` names it.
type ResticVersion struct {
	Major, Minor, Patch int
}

func (v ResticVersion) String() string { return fmt.Sprintf("%d.%d.%d", v.Major, v.Minor, v.Patch) }

// Release is String, or "" for the zero ResticVersion (not known).
func (v ResticVersion) Release() string {
	if v == (ResticVersion{}) {
		return ""
	}
	return v.String()
}

// Less reports whether v is an older release than w.
func (v ResticVersion) Less(w ResticVersion) bool {
	if v.Major != w.Major {
		return v.Major < w.Major
	}
	if v.Minor != w.Minor {
		return v.Minor < w.Minor
	}
	return v.Patch < w.Patch
}

// RestoreJSON reports whether restic v prints a restore's progress as JSON (restore --json came
// in 0.17.0): holdfast then reads restic's own figures, and measures the target otherwise.
func (v ResticVersion) RestoreJSON() bool { return !v.Less(ResticVersion{0, 17, 0}) }

// OldestRestic is the oldest restic holdfast runs: Debian 12's.
var OldestRestic = ResticVersion{0, 14, 0}

// resticVersionLine is the start of `restic version`'s output: "restic 0.14.0 compiled with go1.19.8
// on linux/amd64"; a development build adds "-dev (compiled manually)" or similar after the number.
var resticVersionLine = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^restic (0|[1-9][0-9]{0,3})\.(0|[1-9][0-9]{0,3})\.(0|[1-9][0-9]{0,3})\b`)
})

// ParseResticVersion reads the release from `restic version`'s output.
func ParseResticVersion(out []byte) (ResticVersion, error) {
	first, _, _ := strings.Cut(string(out), "\n")
	first = strings.TrimSpace(first)
	m := resticVersionLine().FindStringSubmatch(first)
	if m == nil {
		shown := first
		if len(shown) > 80 {
			shown = shown[:80] + "…"
		}
		return ResticVersion{}, fmt.Errorf("`version` printed %q, not restic's \"restic X.Y.Z …\"", shown)
	}
	var v ResticVersion
	for i, p := range []*int{&v.Major, &v.Minor, &v.Patch} {
		n, err := strconv.Atoi(m[i+1])
		if err != nil {
			return ResticVersion{}, fmt.Errorf("`version` printed %q: %w", first, err)
		}
		*p = n
	}
	return v, nil
}

// resticVersions caches each binary's version by its path, size and modification time: a
// package upgrade replaces the file, and the next ask runs it again.
var resticVersions sync.Map // versionKey → ResticVersion

type versionKey struct {
	path  string
	size  int64
	mtime time.Time
}

// ResticVersionOf runs `binary version` (once per file, see resticVersions) and returns the
// release, or an error that says what the binary printed and what to install. A release older
// than OldestRestic is an error too.
func ResticVersionOf(ctx context.Context, binary string) (ResticVersion, error) {
	fi, err := os.Stat(binary)
	if err != nil {
		return ResticVersion{}, fmt.Errorf("restic %s: %w", binary, err)
	}
	key := versionKey{binary, fi.Size(), fi.ModTime()}
	if v, ok := resticVersions.Load(key); ok {
		return v.(ResticVersion), nil
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, binary, "version").Output()
	if err != nil {
		return ResticVersion{}, setting.Errorf("restic %s: `version` failed (%v): install restic %s or later (Debian: apt install restic) or name it with {Restic}",
			binary, err, OldestRestic)
	}
	v, err := ParseResticVersion(out)
	if err != nil {
		return ResticVersion{}, setting.Errorf("restic %s: %w: install restic %s or later (Debian: apt install restic) or name it with {Restic}",
			binary, err, OldestRestic)
	}
	if v.Less(OldestRestic) {
		return v, setting.Errorf("restic %s is %s, older than %s, the oldest holdfast runs: install a newer restic or name it with {Restic}",
			binary, v, OldestRestic)
	}
	resticVersions.Store(key, v)
	return v, nil
}

// ResticTraits is what holdfast relies on that differs between restic releases. Each difference
// is stated here once, for the release that brought it (restic's changelog, and holdfast's
// tests on 0.14.0, 0.16.4, 0.18.1 and 0.19.1); code and tests read the trait, never a version
// number.
type ResticTraits struct {
	// StoppedBackupExit is how a backup SIGINT stopped exits: 130 up to 0.16 and again from 0.19;
	// 0.17 and 0.18 cancel the backup and exit 1 ("unable to save snapshot: context canceled").
	// Exec counts either as the stop (a stop passed on ends the attempt 130).
	StoppedBackupExit int
	// FailureExitCodes: restic exits 10 (no repository), 11 (locked) and 12 (wrong password)
	// from 0.17, 1 for each before.
	FailureExitCodes bool
	// FullSnapshotID: a backup's summary names its snapshot by the full 64-hex id from 0.15, by
	// the short 8-hex one before.
	FullSnapshotID bool
	// ExitErrorJSON: with --json, the final error is an "exit_error" line on standard error from
	// 0.18, a "Fatal: …" text before (ParseStderr reads both).
	ExitErrorJSON bool
	// KeepsOldestForUnfilledRule: forget keeps the oldest snapshot when a --keep-daily (weekly,
	// monthly, yearly) rule has fewer snapshots than it would keep, from 0.16.
	KeepsOldestForUnfilledRule bool
}

// ForgetKeepsOldest reports whether restic v's forget keeps the oldest snapshot of a calendar rule
// that is not filled (ResticTraits.KeepsOldestForUnfilledRule). The zero v, a release not known,
// answers as the newest releases do: a plan then keeps more, never less.
func (v ResticVersion) ForgetKeepsOldest() bool {
	return v == (ResticVersion{}) || v.Traits().KeepsOldestForUnfilledRule
}

// Traits returns what restic release v does differently (ResticTraits).
func (v ResticVersion) Traits() ResticTraits {
	from := func(minor int) bool { return !v.Less(ResticVersion{0, minor, 0}) }
	t := ResticTraits{
		StoppedBackupExit:          130,
		FailureExitCodes:           from(17),
		FullSnapshotID:             from(15),
		ExitErrorJSON:              from(18),
		KeepsOldestForUnfilledRule: from(16),
	}
	if from(17) && !from(19) {
		t.StoppedBackupExit = 1
	}
	return t
}
