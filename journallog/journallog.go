// Package journallog is a log/slog handler that writes to journald's native protocol (through
// go-systemd's journal package), for a daemon whose standard error systemd connected to the
// journal. Each attribute becomes a journal field, HOLDFAST_<KEY> (run, job and attempt give
// HOLDFAST_RUN, HOLDFAST_JOB and HOLDFAST_ATTEMPT, the fields the backup units carry too), the
// level becomes PRIORITY, and MESSAGE keeps the attributes as key=value so `journalctl -u
// holdfast` reads as the text log does. `journalctl HOLDFAST_RUN=<id>` then finds the daemon's
// lines about a run beside the run's own output.
//
// It also reads a run's log tail back (RunTail, RunLogs), for the dashboard, the healthchecks
// body and `run logs`: not by such fields, which any local user can write, but by those journald
// sets itself (Match), and bounded.
package journallog

import (
	"context"
	"log/slog"
	"strings"
	"sync"

	"github.com/coreos/go-systemd/v22/journal"
)

// FieldPrefix starts every field the handler adds.
const FieldPrefix = "HOLDFAST_"

// Handler writes records to the journal; see the package comment.
type Handler struct {
	level  slog.Leveler
	attrs  []slog.Attr // from WithAttrs, keys already qualified by their groups
	groups []string
	send   func(message string, priority journal.Priority, fields map[string]string) error
	mu     *sync.Mutex // one record at a time, as the text handler writes
}

// NewHandler returns a handler of records at level and above.
func NewHandler(level slog.Leveler) *Handler {
	return &Handler{level: level, send: journal.Send, mu: &sync.Mutex{}}
}

// ToJournal reports whether systemd connected this process's standard error to the journal.
func ToJournal() bool {
	ok, err := journal.StderrIsJournalStream()
	return err == nil && ok
}

func (h *Handler) Enabled(_ context.Context, l slog.Level) bool { return l >= h.level.Level() }

func (h *Handler) Handle(_ context.Context, r slog.Record) error {
	message, fields := h.entry(r)
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.send(message, priority(r.Level), fields)
}

// entry is the journal entry of r: its message and its fields.
func (h *Handler) entry(r slog.Record) (string, map[string]string) {
	var msg strings.Builder
	msg.WriteString(r.Message)
	fields := map[string]string{}
	add := func(key string, v slog.Value) {
		value := v.Resolve().String()
		msg.WriteString(" " + key + "=" + quote(value))
		fields[FieldName(key)] = value
	}
	for _, a := range h.attrs {
		add(a.Key, a.Value)
	}
	prefix := groupPrefix(h.groups)
	r.Attrs(func(a slog.Attr) bool {
		for _, flat := range flatten(prefix, a) {
			add(flat.Key, flat.Value)
		}
		return true
	})
	return msg.String(), fields
}

func (h *Handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	n := *h
	n.attrs = append([]slog.Attr(nil), h.attrs...)
	for _, a := range attrs {
		n.attrs = append(n.attrs, flatten(groupPrefix(h.groups), a)...)
	}
	return &n
}

func (h *Handler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	n := *h
	n.groups = append(append([]string(nil), h.groups...), name)
	return &n
}

// FieldName is the journal field of an attribute key: FieldPrefix and the key in upper case,
// anything but letters and digits as "_" (journald accepts nothing else).
func FieldName(key string) string {
	var b strings.Builder
	b.WriteString(FieldPrefix)
	for _, c := range strings.ToUpper(key) {
		if c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' {
			b.WriteRune(c)
		} else {
			b.WriteByte('_')
		}
	}
	return b.String()
}

// flatten turns a (group) attribute into plain ones, keys joined with ".".
func flatten(prefix string, a slog.Attr) []slog.Attr {
	v := a.Value.Resolve()
	if v.Kind() != slog.KindGroup {
		if a.Key == "" {
			return nil
		}
		return []slog.Attr{{Key: prefix + a.Key, Value: v}}
	}
	inner := prefix
	if a.Key != "" {
		inner = prefix + a.Key + "."
	}
	var out []slog.Attr
	for _, g := range v.Group() {
		out = append(out, flatten(inner, g)...)
	}
	return out
}

func groupPrefix(groups []string) string {
	if len(groups) == 0 {
		return ""
	}
	return strings.Join(groups, ".") + "."
}

// quote quotes a value in MESSAGE when it has spaces or quotes, as the text handler does.
func quote(s string) string {
	if s == "" || strings.ContainsAny(s, " \t\n\"=") {
		return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(s) + `"`
	}
	return s
}

// priority maps slog's levels to syslog's.
func priority(l slog.Level) journal.Priority {
	switch {
	case l >= slog.LevelError:
		return journal.PriErr
	case l >= slog.LevelWarn:
		return journal.PriWarning
	case l >= slog.LevelInfo:
		return journal.PriInfo
	}
	return journal.PriDebug
}
