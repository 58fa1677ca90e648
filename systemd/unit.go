package systemd

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	sddbus "github.com/coreos/go-systemd/v22/dbus"
	"github.com/coreos/go-systemd/v22/unit"
	"github.com/godbus/dbus/v5"
	"github.com/google/uuid"
)

// MaxUnitName is systemd's limit on a unit name's length.
const MaxUnitName = 255

// UnitName is the name of the one unit an attempt may have: holdfast-<job>-<run>-a<N>.service.
// The whole run id is kept, not a prefix: the name must never collide, across every run in the
// history and every manager sharing one cgroup tree.
func UnitName(job string, run uuid.UUID, attempt int) string {
	name := "holdfast-" + unit.UnitNameEscape(job) + "-" + run.String() + "-a" + strconv.Itoa(attempt) + ".service"
	if len(name) > MaxUnitName {
		name = "holdfast-" + run.String() + "-a" + strconv.Itoa(attempt) + ".service"
	}
	return name
}

// QueryUnitName is the name of a short unit that asks a tool about a job's repository.
func QueryUnitName(job string, id uuid.UUID) string {
	name := "holdfast-" + unit.UnitNameEscape(job) + "-query-" + id.String() + ".service"
	if len(name) > MaxUnitName {
		name = "holdfast-query-" + id.String() + ".service"
	}
	return name
}

// Spec describes one transient service.
type Spec struct {
	Name        string
	Description string
	ExecStart   []string
	// ExecStopPost runs after the service ended, however it ended, with full privileges even when
	// User is set, so it can write where the job's user cannot.
	ExecStopPost      []string
	KillSignal        syscall.Signal // 0 = systemd's default (SIGTERM)
	TimeoutStop       time.Duration  // 0 = systemd's default
	RuntimeMax        time.Duration  // 0 = no limit
	User              string
	Group             string
	Nice              *int
	IOSchedulingClass string // "", "realtime", "best-effort", "idle"
	SyslogIdentifier  string
	Environment       []string          // KEY=value
	LogExtraFields    map[string]string // exported by the system manager; a user manager ignores them
	WorkingDirectory  string
	// LoadCredentials are files systemd copies into the unit's $CREDENTIALS_DIRECTORY, readable
	// by the unit's user alone. Only the names and paths are in the unit, never the content.
	LoadCredentials []Credential
	// EnvironmentFiles are read by the manager into the unit's environment.
	EnvironmentFiles []string
	// Sandbox confines the unit; nil leaves it unconfined.
	Sandbox *Sandbox
	// CollectFailed keeps a failed unit loaded until ResetFailed, so how it ended can be read
	// from its properties (for Output); otherwise ended units are collected at once.
	CollectFailed bool

	stdout, stderr *os.File // set by Output
}

// Credential is one LoadCredential= entry: a name in the unit and the file systemd reads it from.
type Credential struct {
	Name string
	Path string
	// Encrypted has systemd decrypt the file (systemd-creds encrypt's) as the unit starts:
	// LoadCredentialEncrypted= instead of LoadCredential=.
	Encrypted bool
}

var ioClasses = map[string]int32{"realtime": 1, "best-effort": 2, "idle": 3}

// escapeDollar keeps systemd from expanding $VAR in a command line it received as argv.
func escapeDollar(argv []string) []string {
	out := make([]string, len(argv))
	for i, a := range argv {
		out[i] = strings.ReplaceAll(a, "$", "$$")
	}
	return out
}

type execCommand struct {
	Path          string
	Argv          []string
	IgnoreFailure bool
}

func prop(name string, value any) sddbus.Property {
	return sddbus.Property{Name: name, Value: dbus.MakeVariant(value)}
}

func (s Spec) properties() ([]sddbus.Property, error) {
	if len(s.ExecStart) == 0 {
		return nil, fmt.Errorf("unit %s: no ExecStart", s.Name)
	}
	start := escapeDollar(s.ExecStart)
	props := []sddbus.Property{
		sddbus.PropType("exec"),
		sddbus.PropDescription(s.Description),
		prop("ExecStart", []execCommand{{Path: start[0], Argv: start}}),
		prop("KillMode", "mixed"),
	}
	if !s.CollectFailed {
		// Failed units are collected too: the marker, not the unit, carries how it ended.
		props = append(props, prop("CollectMode", "inactive-or-failed"))
	}
	if s.stdout == nil {
		props = append(props, prop("StandardOutput", "journal"), prop("StandardError", "journal"))
	} else {
		props = append(props, prop("StandardOutputFileDescriptor", dbus.UnixFD(s.stdout.Fd())),
			prop("StandardErrorFileDescriptor", dbus.UnixFD(s.stderr.Fd())))
	}
	if len(s.ExecStopPost) > 0 {
		// PermissionsStartOnly keeps User= and the sandbox to ExecStart, so ExecStopPost runs
		// with full privileges. The "+" flag of ExecStopPostEx would say the same, but systemd
		// 252 writes it into the transient unit file as a key it cannot read back: a re-exec or
		// reload then drops the command from every running unit.
		post := escapeDollar(s.ExecStopPost)
		props = append(props, prop("PermissionsStartOnly", true),
			prop("ExecStopPost", []execCommand{{Path: post[0], Argv: post}}))
	}
	if s.KillSignal != 0 {
		props = append(props, prop("KillSignal", int32(s.KillSignal)))
	}
	if s.TimeoutStop > 0 {
		props = append(props, prop("TimeoutStopUSec", uint64(s.TimeoutStop/time.Microsecond)))
	}
	if s.RuntimeMax > 0 {
		props = append(props, prop("RuntimeMaxUSec", uint64(s.RuntimeMax/time.Microsecond)))
	}
	if s.User != "" {
		props = append(props, prop("User", s.User))
	}
	if s.Group != "" {
		props = append(props, prop("Group", s.Group))
	}
	if s.Nice != nil {
		props = append(props, prop("Nice", int32(*s.Nice)))
	}
	if s.IOSchedulingClass != "" {
		class, ok := ioClasses[s.IOSchedulingClass]
		if !ok {
			return nil, fmt.Errorf("unit %s: unknown IO scheduling class %q", s.Name, s.IOSchedulingClass)
		}
		props = append(props, prop("IOSchedulingClass", class))
	}
	if s.SyslogIdentifier != "" {
		props = append(props, prop("SyslogIdentifier", s.SyslogIdentifier))
	}
	if len(s.Environment) > 0 {
		props = append(props, prop("Environment", s.Environment))
	}
	if len(s.LogExtraFields) > 0 {
		var fields [][]byte
		for k, v := range s.LogExtraFields {
			fields = append(fields, []byte(k+"="+v))
		}
		props = append(props, prop("LogExtraFields", fields))
	}
	if s.WorkingDirectory != "" {
		props = append(props, prop("WorkingDirectory", s.WorkingDirectory))
	}
	var plain, encrypted []struct{ Name, Path string }
	for _, c := range s.LoadCredentials {
		if c.Encrypted {
			encrypted = append(encrypted, struct{ Name, Path string }{c.Name, c.Path})
		} else {
			plain = append(plain, struct{ Name, Path string }{c.Name, c.Path})
		}
	}
	if len(plain) > 0 {
		props = append(props, prop("LoadCredential", plain))
	}
	if len(encrypted) > 0 {
		props = append(props, prop("LoadCredentialEncrypted", encrypted))
	}
	if len(s.EnvironmentFiles) > 0 {
		files := make([]struct {
			Path     string
			Optional bool
		}, len(s.EnvironmentFiles))
		for i, f := range s.EnvironmentFiles {
			files[i].Path = f
		}
		props = append(props, prop("EnvironmentFiles", files))
	}
	if s.Sandbox != nil {
		sp, err := s.Sandbox.properties(s.User != "")
		if err != nil {
			return nil, fmt.Errorf("unit %s: %w", s.Name, err)
		}
		props = append(props, sp...)
	}
	return props, nil
}

// Start asks systemd to start the transient unit. It reports existed=true when a unit of that
// name is already there: the attempt was started before (perhaps by a process that died before
// it could record it), and nothing new was created.
func (r *Client) Start(ctx context.Context, s Spec) (existed bool, err error) {
	props, err := s.properties()
	if err != nil {
		return false, err
	}
	err = r.call(ctx, func(ctx context.Context, c *sddbus.Conn) error {
		// No result channel: how the unit ends is read from its marker, never from the job
		// result, and go-systemd serializes every call that registers a channel.
		_, err := c.StartTransientUnitContext(ctx, s.Name, "fail", props, nil)
		return err
	})
	if dbusErrorName(err) == "org.freedesktop.systemd1.UnitExists" {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("start unit %s: %w", s.Name, err)
	}
	return false, nil
}

// TimerName is the name of the transient timer that starts the service named service (see Arm).
func TimerName(service string) string {
	return strings.TrimSuffix(service, ".service") + ".timer"
}

// Arm asks systemd to start the transient service s at at, from a transient timer of its own
// (TimerName(s.Name)): one call creates both, the service loaded and not started until the timer
// elapses, so nothing is left to do at at but the start itself. The timer goes away once it has
// elapsed. at must be ahead. existed is as in Start.
//
// The timer elapses as long after systemd started it as at was ahead when asked (OnActiveSec),
// never at a calendar time: the call returns once the timer's start job is queued, and a
// manager with many jobs queued (a thousand runs due at once) may start the timer only after
// at, when a calendar time already past would never elapse (its service never started, the run
// restarted after the spawn grace). Started in time, the timer elapses at at, within the
// milliseconds the manager took to start it; started late, as late as the manager was.
func (r *Client) Arm(ctx context.Context, s Spec, at time.Time) (existed bool, err error) {
	props, err := s.properties()
	if err != nil {
		return false, err
	}
	timer := TimerName(s.Name)
	timerProps := []sddbus.Property{
		prop("Description", "start of "+s.Name),
		prop("TimersMonotonic", []struct {
			Base string
			USec uint64
		}{{"OnActiveSec", uint64(max(time.Until(at), time.Microsecond) / time.Microsecond)}}),
		prop("AccuracyUSec", uint64(1)), // systemd's default of a minute would coalesce starts late
		prop("RemainAfterElapse", false),
	}
	err = r.call(ctx, func(ctx context.Context, c *sddbus.Conn) error {
		_, err := c.StartTransientUnitAux(ctx, timer, "fail", timerProps,
			[]sddbus.PropertyCollection{{Name: s.Name, Properties: props}}, nil)
		return err
	})
	if dbusErrorName(err) == "org.freedesktop.systemd1.UnitExists" {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("arm unit %s at %s: %w", s.Name, at.UTC().Format(time.RFC3339Nano), err)
	}
	return false, nil
}

// State is what systemd said about a unit.
type State struct {
	LoadState   string
	ActiveState string
	SubState    string
}

// Alive reports whether the state is one of a unit that is still there: starting, running, or
// stopping (its ExecStopPost has not finished). Inactive, failed and unknown units are not alive;
// after garbage collection systemd cannot tell "ended" from "never existed".
func (s State) Alive() bool {
	switch s.ActiveState {
	case "active", "activating", "deactivating", "reloading", "refreshing":
		return true
	}
	return false
}

// maxNamesPerCall bounds one ListUnitsByNames call so a large sweep stays far from D-Bus's
// message size limit.
const maxNamesPerCall = 512

// States asks systemd about many units at once. An error means systemd could not be asked and
// says nothing about any unit: never read it as "gone".
func (r *Client) States(ctx context.Context, names []string) (map[string]State, error) {
	states := make(map[string]State, len(names))
	for start := 0; start < len(names); start += maxNamesPerCall {
		batch := names[start:min(start+maxNamesPerCall, len(names))]
		err := r.call(ctx, func(ctx context.Context, c *sddbus.Conn) error {
			units, err := c.ListUnitsByNamesContext(ctx, batch)
			if err != nil {
				return err
			}
			if len(units) != len(batch) {
				return fmt.Errorf("systemd returned %d units for %d names", len(units), len(batch))
			}
			for _, u := range units {
				states[u.Name] = State{LoadState: u.LoadState, ActiveState: u.ActiveState, SubState: u.SubState}
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("ask systemd about %d units: %w", len(batch), err)
		}
	}
	return states, nil
}

// UnitPattern matches the name of every unit holdfast starts.
const UnitPattern = "holdfast-*"

// StatesMatching asks systemd about every unit it has loaded whose name matches pattern (a
// shell pattern), in one call. A unit not in the answer was not loaded: systemd would say
// "not-found" of it, as NotFound does. An error is as for States.
func (r *Client) StatesMatching(ctx context.Context, pattern string) (map[string]State, error) {
	var states map[string]State
	err := r.call(ctx, func(ctx context.Context, c *sddbus.Conn) error {
		units, err := c.ListUnitsByPatternsContext(ctx, []string{}, []string{pattern})
		if err != nil {
			return err
		}
		states = make(map[string]State, len(units))
		for _, u := range units {
			states[u.Name] = State{LoadState: u.LoadState, ActiveState: u.ActiveState, SubState: u.SubState}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("ask systemd about the units named %s: %w", pattern, err)
	}
	return states, nil
}

// NotFound is the state systemd gives a unit it does not know.
var NotFound = State{LoadState: "not-found", ActiveState: "inactive", SubState: "dead"}

// Alive reports whether one unit is still there (see State.Alive). An error means systemd could
// not be asked and says nothing about the unit.
func (r *Client) Alive(ctx context.Context, name string) (bool, State, error) {
	states, err := r.States(ctx, []string{name})
	if err != nil {
		return false, State{}, err
	}
	st := states[name]
	return st.Alive(), st, nil
}

// Stop asks systemd to stop the unit (its KillSignal, then SIGKILL after TimeoutStop). Asking
// again is harmless; a unit that is not loaded is already stopped.
func (r *Client) Stop(ctx context.Context, name string) error {
	err := r.call(ctx, func(ctx context.Context, c *sddbus.Conn) error {
		_, err := c.StopUnitContext(ctx, name, "replace", nil)
		return err
	})
	if dbusErrorName(err) == "org.freedesktop.systemd1.NoSuchUnit" {
		return nil
	}
	if err != nil {
		return fmt.Errorf("stop unit %s: %w", name, err)
	}
	return nil
}

// ResetFailed clears a failed unit that was not garbage-collected, so its name can be used again.
func (r *Client) ResetFailed(ctx context.Context, name string) error {
	err := r.call(ctx, func(ctx context.Context, c *sddbus.Conn) error { return c.ResetFailedUnitContext(ctx, name) })
	if dbusErrorName(err) == "org.freedesktop.systemd1.NoSuchUnit" {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reset failed unit %s: %w", name, err)
	}
	return nil
}
