package systemd

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/google/uuid"
	"golang.org/x/sys/unix"
)

// Marker is the exit marker an attempt's ExecStopPost writes: how systemd saw the service end.
// Present means the unit ended.
type Marker struct {
	Run           uuid.UUID `json:"run"`
	Attempt       int       `json:"attempt"`
	Unit          string    `json:"unit"`
	ServiceResult string    `json:"service_result"` // $SERVICE_RESULT: success, exit-code, signal, timeout, oom-kill, core-dump, watchdog, ...
	ExitCode      string    `json:"exit_code"`      // $EXIT_CODE: exited, killed, dumped ("" if the process never ran)
	ExitStatus    string    `json:"exit_status"`    // $EXIT_STATUS: a number if exited, else a signal name
	At            time.Time `json:"at"`
}

// maxMarker bounds what ReadMarker reads: a real marker is a few hundred bytes.
const maxMarker = 64 << 10

var (
	// ErrNoMarker means the attempt's unit has not ended (or never ran): read again later.
	ErrNoMarker = errors.New("no exit marker")
	// ErrMarkerUnreadable means a marker exists but cannot be parsed or does not belong to the
	// attempt. It was written atomically, so something outside holdfast changed it: re-reading
	// will not repair it.
	ErrMarkerUnreadable = errors.New("exit marker unreadable")
)

// MarkerPath is where the marker of an attempt lives under the state directory.
func MarkerPath(stateDir string, run uuid.UUID, attempt int) string {
	return filepath.Join(stateDir, "markers", markerName(run, attempt))
}

func markerName(run uuid.UUID, attempt int) string {
	return run.String() + ".a" + strconv.Itoa(attempt) + ".json"
}

// WriteMarker writes m to its path atomically: a temporary file, fsync, rename, fsync of the
// directory. A reader sees either no marker or the whole marker.
func WriteMarker(stateDir string, m Marker) error {
	path := MarkerPath(stateDir, m.Run, m.Attempt)
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("write marker: %w", err)
	}
	data, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("write marker: %w", err)
	}
	tmp, err := os.CreateTemp(dir, ".marker-*")
	if err != nil {
		return fmt.Errorf("write marker: %w", err)
	}
	defer os.Remove(tmp.Name()) // a no-op after the rename
	if _, err := tmp.Write(append(data, '\n')); err != nil {
		tmp.Close()
		return fmt.Errorf("write marker %s: %w", path, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("write marker %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write marker %s: %w", path, err)
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return fmt.Errorf("write marker %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write marker %s: %w", path, err)
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("write marker %s: %w", path, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("write marker %s: sync directory: %w", path, err)
	}
	return nil
}

// ReadMarker reads the marker of an attempt. It returns ErrNoMarker if there is none,
// an error wrapping ErrMarkerUnreadable if there is one that cannot be trusted, and any other
// error (permissions, I/O) as it is: those may pass.
func ReadMarker(stateDir string, run uuid.UUID, attempt int) (Marker, error) {
	path := MarkerPath(stateDir, run, attempt)
	// Only root writes the markers directory; still, what stands there is opened as data, never
	// followed as a link nor opened as a terminal or a blocking pipe.
	fd, err := unix.Open(path, markerFlags, 0)
	return readMarker(fd, err, path, run, attempt)
}

const markerFlags = unix.O_RDONLY | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_NOCTTY | unix.O_CLOEXEC

// Markers is the markers directory opened once, for a pass that reads the markers of many
// attempts without resolving the directory's path for each.
type Markers struct {
	fd       int
	stateDir string
}

// OpenMarkers opens the markers directory of stateDir.
func OpenMarkers(stateDir string) (*Markers, error) {
	dir := filepath.Dir(MarkerPath(stateDir, uuid.Nil, 1))
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: dir, Err: err}
	}
	return &Markers{fd: fd, stateDir: stateDir}, nil
}

// Read reads the marker of an attempt as ReadMarker does.
func (m *Markers) Read(run uuid.UUID, attempt int) (Marker, error) {
	fd, err := unix.Openat(m.fd, markerName(run, attempt), markerFlags, 0)
	if errors.Is(err, unix.ENOENT) { // the common case: not one allocation more
		return Marker{}, ErrNoMarker
	}
	return readMarker(fd, err, MarkerPath(m.stateDir, run, attempt), run, attempt)
}

// Close closes the directory.
func (m *Markers) Close() error { return unix.Close(m.fd) }

// readMarker reads the marker that fd, opened at path with markerFlags, holds; err is the
// open's error.
func readMarker(fd int, err error, path string, run uuid.UUID, attempt int) (Marker, error) {
	if errors.Is(err, unix.ENOENT) {
		return Marker{}, ErrNoMarker
	}
	if errors.Is(err, unix.ELOOP) {
		return Marker{}, fmt.Errorf("%w: it is a symbolic link (%s)", ErrMarkerUnreadable, path)
	}
	if err != nil {
		return Marker{}, fmt.Errorf("read marker: %w", &os.PathError{Op: "open", Path: path, Err: err})
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	if fi, err := f.Stat(); err != nil {
		return Marker{}, fmt.Errorf("read marker %s: %w", path, err)
	} else if !fi.Mode().IsRegular() {
		return Marker{}, fmt.Errorf("%w: it is not a regular file (%s)", ErrMarkerUnreadable, path)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxMarker+1))
	if err != nil {
		return Marker{}, fmt.Errorf("read marker %s: %w", path, err)
	}
	m, err := ParseMarker(data)
	if err != nil {
		return Marker{}, fmt.Errorf("%w (%s)", err, path)
	}
	if m.Run != run || m.Attempt != attempt {
		return Marker{}, fmt.Errorf("%w: it belongs to run %s attempt %d (%s)", ErrMarkerUnreadable, m.Run, m.Attempt, path)
	}
	return m, nil
}

// ParseMarker parses a marker's bytes. Every failure wraps ErrMarkerUnreadable.
func ParseMarker(data []byte) (Marker, error) {
	if len(data) > maxMarker {
		return Marker{}, fmt.Errorf("%w: over %d bytes", ErrMarkerUnreadable, maxMarker)
	}
	var m Marker
	if err := json.Unmarshal(data, &m); err != nil {
		return Marker{}, fmt.Errorf("%w: %v", ErrMarkerUnreadable, err)
	}
	switch {
	case m.Run == uuid.Nil:
		return Marker{}, fmt.Errorf("%w: no run id", ErrMarkerUnreadable)
	case m.Attempt < 1:
		return Marker{}, fmt.Errorf("%w: attempt %d", ErrMarkerUnreadable, m.Attempt)
	case m.ServiceResult == "":
		return Marker{}, fmt.Errorf("%w: no service_result", ErrMarkerUnreadable)
	case m.ExitCode != "" && m.ExitCode != "exited" && m.ExitCode != "killed" && m.ExitCode != "dumped":
		return Marker{}, fmt.Errorf("%w: unknown exit_code %q", ErrMarkerUnreadable, m.ExitCode)
	}
	if m.ExitCode == "exited" {
		if _, err := strconv.Atoi(m.ExitStatus); err != nil {
			return Marker{}, fmt.Errorf("%w: exit_status %q is not a number", ErrMarkerUnreadable, m.ExitStatus)
		}
	}
	return m, nil
}

// MarkerFromEnv builds the marker of an attempt's unit from the variables systemd gives its
// ExecStopPost ($SERVICE_RESULT, $EXIT_CODE, $EXIT_STATUS), refusing what systemd never sets.
func MarkerFromEnv(run uuid.UUID, attempt int, unit string, getenv func(string) string, at time.Time) (Marker, error) {
	m := Marker{Run: run, Attempt: attempt, Unit: unit, ServiceResult: getenv("SERVICE_RESULT"),
		ExitCode: getenv("EXIT_CODE"), ExitStatus: getenv("EXIT_STATUS"), At: at.UTC()}
	switch {
	case attempt < 1:
		return Marker{}, fmt.Errorf("attempt %d: an attempt's number is at least 1", attempt)
	case m.ServiceResult == "":
		return Marker{}, errors.New("SERVICE_RESULT is not set: this command runs as a unit's ExecStopPost")
	case m.ExitCode == "exited":
		if _, err := strconv.Atoi(m.ExitStatus); err != nil {
			return Marker{}, fmt.Errorf("EXIT_STATUS %q is not a number", m.ExitStatus)
		}
	}
	return m, nil
}
