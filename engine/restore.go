package engine

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// What a restore's sandbox keeps restic from restoring (systemd.Sandbox): RestrictSUIDSGID makes
// a chmod that sets a setuid or setgid bit fail whole (EPERM), and PrivateDevices with no
// CAP_MKNOD makes mknod of a device fail. Each is an item error of the restore, its message
// starting so; a restore that lost nothing else is partial, not failed (Restore.Finish).
const (
	LostSetID  = "setuid/setgid bit not restored: the restore's sandbox forbids them"
	LostDevice = "device node not restored: the restore's sandbox forbids device nodes"
)

// notPermitted is how restic words EPERM, which only the sandbox causes here.
const notPermitted = "operation not permitted"

// sandboxLoss reads what follows restic restore's "ignoring error for " when it is a loss the
// sandbox caused, "ITEM: MSG": the item, and the loss in holdfast's words; ok is false for any
// other. MSG is
//   - "mknod PATH: operation not permitted" (0.17.2 and later), or a bare "operation not
//     permitted" (0.14.0 to 0.17.1 return mknod's errno as it is; no other step of their restore
//     does, and none but mknod meets EPERM in the sandbox): a device node;
//   - "chmod PATH: operation not permitted" (0.17.1 and later, as root; earlier versions, and
//     any version as another user, drop a chmod's error): the chmod of a mode with a setuid or
//     setgid bit, which the sandbox refuses whole. A root restore may change any file's mode
//     (CAP_FOWNER), and restic's lchown came first and succeeded, or restic would name it.
//
// PATH is the target's ITEM, so an ITEM with ": " in it is still found whole. The bare form
// cannot tell such an ITEM from another error's words: it is taken only for an ITEM without.
func sandboxLoss(rest string) (item, msg string, ok bool) {
	body, isEPERM := strings.CutSuffix(rest, ": "+notPermitted)
	if !isEPERM {
		return "", "", false
	}
	for i := strings.Index(body, ": "); i >= 0; {
		item, m := body[:i], body[i+2:]
		if op, path, _ := strings.Cut(m, " "); strings.HasSuffix(path, item) {
			switch op {
			case "mknod":
				return item, LostDevice, true
			case "chmod":
				// restic's own line, in the unit's log, names the file under the target.
				return item, LostSetID + " (the chmod failed whole: restic set none of its mode)", true
			}
		}
		next := strings.Index(body[i+2:], ": ")
		if next < 0 {
			break
		}
		i += 2 + next
	}
	if !strings.Contains(body, ": ") {
		return body, LostDevice, true
	}
	return "", "", false
}

// A Finisher is a Parser with the last word on how an engine's run ended. Exec asks it once,
// after the engine exited (not killed by a signal) and before the fatal error it holds back and
// the exit are journaled, with the exit status and that fatal error (nil if none; one already
// journaled is not given). Its events are journaled as the engine's would be; the status and
// fatal error it returns are the attempt's. stderr gets what it has to say.
type Finisher interface {
	Finish(ctx context.Context, status int, fatal *Fatal, stderr io.Writer) ([]Event, int, *Fatal)
}

// Restore reads a restore (restic restore --target Target ID) in its sandbox: as Restic does,
// and at the end it accounts for what the sandbox kept restic from restoring (Finish).
type Restore struct {
	Restic // Operation OpRestore
	Target string
	// List is restic listing the snapshot restored (ListArgv), compared with the target for the
	// setuid and setgid bits restic does not report lost; nil compares nothing.
	List []string
	// Since is when the restore started: a file under the target changed before it (one that
	// was there before a restore with --overwrite) is not the restore's. Zero takes every file.
	Since time.Time
	// PutBack, if set, puts what restic restored back at its own paths (a restore to the
	// original paths, whose Target is its stage) once restic restored it (exit 0) or lost only
	// what the sandbox forbids (3). Its events are the attempt's; its status, if not 0, is
	// the attempt's: 3 (partial) if it kept entries, 1 if it failed to put some back.
	PutBack func(stderr io.Writer) (events []Event, status int)

	losses   int             // the items restic reported the sandbox refused
	reported map[string]bool // every item restic reported, up to maxReported
	summary  *Progress       // restic's summary (restore --json), said in the unit's log at the end
}

var _ Finisher = (*Restore)(nil)

// maxReported bounds the items Restore remembers restic reported, so that the comparison with
// the listing does not report one again; a restore with more errors is a failure anyway.
const maxReported = 10000

// maxSetIDLosses bounds the setuid/setgid bits the comparison reports: the job's user can make
// as many such files of its own as it likes, and each would be an event.
const maxSetIDLosses = 1000

// ParseStdout reads a line as Restic does and remembers restic's summary (restore --json, 0.17
// and later), which prints nothing else a reader of the unit's log would see.
func (r *Restore) ParseStdout(line []byte) (Event, bool) {
	ev, ok := r.Restic.ParseStdout(line)
	if m, isJSON := decodeMessage(line); ok && isJSON && m.MessageType == "summary" {
		p := ev.Payload.(Progress)
		r.summary = &p
	}
	return ev, ok
}

// ParseStderr reads a line as Restic does and remembers the items restic could not restore.
func (r *Restore) ParseStderr(line []byte) (Event, bool) {
	ev, ok := r.Restic.ParseStderr(line)
	if ie, isItem := ev.Payload.(ItemError); ok && isItem && ie.During == "restore" {
		if strings.HasPrefix(ie.Message, LostSetID) || strings.HasPrefix(ie.Message, LostDevice) {
			r.losses++
		}
		if r.reported == nil {
			r.reported = make(map[string]bool)
		}
		if len(r.reported) < maxReported {
			r.reported[ie.Item] = true
		}
	}
	return ev, ok
}

// thereWere is restic restore's last word after errors it went past: "Fatal: There were N errors".
// With --json, restic 0.18 and later say it as an exit_error, without "Fatal: ".
var thereWere = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^(?:Fatal: )?There were (\d+) errors\s*$`) })

// Finish adds to a restore that ran to its end (exit 0, or 1 after restic's count of its errors)
// an item error for each setuid/setgid bit the sandbox dropped without restic saying so
// (restic before 0.17.1 drops a failed chmod's error, and every version does so when not root):
// a comparison of restic's listing of the snapshot with the target, as the listing streams by,
// that looks at the few files with such a bit only. Then a restore whose every error restic
// counted was the sandbox's exits 3, partial, instead of restic's 1: the rest is restored.
func (r *Restore) Finish(ctx context.Context, status int, fatal *Fatal, stderr io.Writer) ([]Event, int, *Fatal) {
	if stderr == nil {
		stderr = io.Discard
	}
	if p := r.summary; p != nil {
		fmt.Fprintf(stderr, "holdfast: restic restored %s of %d (%s of %s) into %s\n",
			plural(p.FilesDone, "file"), p.TotalFiles, FormatBytes(p.BytesDone), FormatBytes(p.TotalBytes), r.Target)
	}
	counted := -1
	if status == 1 && fatal != nil {
		if m := thereWere().FindStringSubmatch(fatal.Message); m != nil {
			counted, _ = strconv.Atoi(m[1])
		}
	}
	if status != 0 && counted < 0 {
		return nil, status, fatal // restic stopped short of the end: its own failure stands
	}
	var evs []Event
	if len(r.List) > 0 && ctx.Err() == nil {
		if version, err := resticVersion(ctx, r.List[0]); err != nil || !reportsModes(version, geteuid()) {
			evs = r.compareModes(ctx, stderr)
		}
	}
	if counted > 0 && counted == r.losses {
		msg := fmt.Sprintf("restic exited 1 after %s, each a loss the restore's sandbox forbids: the rest is restored (exit status 3, partial)",
			plural(int64(counted), "error"))
		fmt.Fprintf(stderr, "holdfast: %s\n", msg)
		evs = append(evs, Event{TypeWarning, Warning{Message: msg}})
		status, fatal = 3, nil
	}
	if r.PutBack != nil && (status == 0 || status == 3) {
		// Whatever stops the unit now: what restic restored goes into place, a rename each.
		put, putStatus := r.PutBack(stderr)
		evs = append(evs, put...)
		if putStatus == 1 || putStatus == 3 && status == 0 {
			status = putStatus
		}
	}
	return evs, status, fatal
}

// resticVersion is what `restic version` says, such as "restic 0.14.0 compiled with go1.19.8 on
// linux/amd64".
func resticVersion(ctx context.Context, restic string) (string, error) {
	cmd := interruptible(exec.CommandContext(ctx, restic, "version"))
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("%s version: %w", restic, err)
	}
	return string(out), nil
}

// geteuid is os.Geteuid; a test stands in for another user.
var geteuid = os.Geteuid

var versionLine = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^restic (\d+)\.(\d+)\.(\d+)`) })

// reportsModes reports whether the restic that says version reports a chmod the sandbox refused
// when run with euid: 0.17.1 and later do as root (restic's #4958); a version it cannot read
// is taken not to.
func reportsModes(version string, euid int) bool {
	m := versionLine().FindStringSubmatch(version)
	if m == nil || euid != 0 {
		return false
	}
	var v [3]int
	for i := range v {
		v[i], _ = strconv.Atoi(m[i+1])
	}
	return v[0] > 0 || v[1] > 17 || v[1] == 17 && v[2] >= 1
}

// lsNode is the part of a line of `restic ls --json` that the comparison reads.
type lsNode struct {
	StructType string      `json:"struct_type"`
	Type       string      `json:"type"`
	Path       string      `json:"path"`
	Mode       fs.FileMode `json:"mode"`
}

const setID = fs.ModeSetuid | fs.ModeSetgid

// compareModes runs the listing and reports each file or directory whose setuid or setgid bit
// the target lacks, if the restore put it there (changed since r.Since) and restic did not
// report it already. A listing that fails is a warning: the restore's outcome stands.
func (r *Restore) compareModes(ctx context.Context, stderr io.Writer) []Event {
	if _, isFile := stderr.(*os.File); !isFile {
		// restic's stderr is copied in by a goroutine while the losses are said.
		stderr = &lockedWriter{w: stderr}
	}
	ls := interruptible(exec.CommandContext(ctx, r.List[0], r.List[1:]...))
	ls.Stderr = stderr
	out, err := ls.StdoutPipe()
	if err != nil {
		return []Event{r.unchecked(stderr, err)}
	}
	if err := ls.Start(); err != nil {
		return []Event{r.unchecked(stderr, err)}
	}
	evs, readErr := r.lostSetIDs(out, stderr)
	_, _ = io.Copy(io.Discard, out)
	if err := ls.Wait(); err != nil {
		return append(evs, r.unchecked(stderr, err))
	}
	if readErr != nil {
		return append(evs, r.unchecked(stderr, readErr))
	}
	return evs
}

// lostSetIDs reads a listing of the snapshot and returns an item error for each setuid/setgid
// bit the target lacks (compareModes), said on stderr too.
func (r *Restore) lostSetIDs(listing io.Reader, stderr io.Writer) ([]Event, error) {
	var evs []Event
	sc := bufio.NewScanner(listing)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	more := 0
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var n lsNode
		if err := json.Unmarshal(line, &n); err != nil {
			return evs, fmt.Errorf("a line of the listing is not JSON: %.80q", line)
		}
		if n.StructType != "node" || n.Mode&setID == 0 || (n.Type != "file" && n.Type != "dir") || r.reported[n.Path] {
			continue
		}
		fi, err := os.Lstat(filepath.Join(r.Target, n.Path))
		if err != nil || fi.Mode()&setID == n.Mode&setID || !r.restored(fi) {
			continue // not restored (not included, or restic said why), or restored whole
		}
		if len(evs) == maxSetIDLosses {
			more++
			continue
		}
		ie := ItemError{Item: n.Path, During: "restore",
			Message: fmt.Sprintf("%s (mode %s in the snapshot, %s restored)", LostSetID, unixMode(n.Mode), unixMode(fi.Mode()))}
		fmt.Fprintf(stderr, "holdfast: %s\n", ie)
		evs = append(evs, Event{TypeItemError, ie})
	}
	if more > 0 {
		msg := fmt.Sprintf("%s more setuid/setgid bits not restored: the restore's sandbox forbids them", strconv.Itoa(more))
		fmt.Fprintf(stderr, "holdfast: %s\n", msg)
		evs = append(evs, Event{TypeWarning, Warning{Message: msg}})
	}
	return evs, sc.Err()
}

// restored reports whether the restore changed fi: restic sets every file's times, which moves
// its ctime, so an older ctime is a file that was there before. The kernel stamps files from a
// coarse clock, a tick behind the one Since was read from: a second's slack covers it.
func (r *Restore) restored(fi fs.FileInfo) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || r.Since.IsZero() {
		return true
	}
	return !time.Unix(st.Ctim.Unix()).Before(r.Since.Add(-time.Second))
}

// unchecked is the warning that the setuid/setgid bits could not be compared.
func (r *Restore) unchecked(stderr io.Writer, err error) Event {
	msg := "the restored files' setuid/setgid bits could not be checked: " + err.Error()
	fmt.Fprintf(stderr, "holdfast: %s\n", msg)
	return Event{TypeWarning, Warning{Message: msg}}
}

// unixMode is a mode's permission bits as chmod takes them, such as "4755".
func unixMode(m fs.FileMode) string {
	u := uint32(m.Perm())
	if m&fs.ModeSetuid != 0 {
		u |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		u |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		u |= 0o1000
	}
	return fmt.Sprintf("%04o", u)
}
