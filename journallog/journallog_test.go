package journallog

import (
	"errors"
	"log/slog"
	"maps"
	"testing"

	"github.com/coreos/go-systemd/v22/journal"
)

type sent struct {
	message  string
	priority journal.Priority
	fields   map[string]string
}

// capture returns a logger whose handler hands its entries to the returned slice instead of
// journald: the mapping is pure logic; the booted-host tests read the real journal.
func capture(level slog.Level) (*slog.Logger, *[]sent) {
	var got []sent
	h := NewHandler(level)
	h.send = func(m string, p journal.Priority, f map[string]string) error {
		got = append(got, sent{m, p, f})
		return nil
	}
	return slog.New(h), &got
}

func TestEntries(t *testing.T) {
	tests := []struct {
		name string
		log  func(*slog.Logger)
		want []sent
	}{
		{"a run's line carries the fields the units carry", func(l *slog.Logger) {
			l.Info("run spawned", "run", "3e99", "attempt", 1, "job", "web", "unit", "holdfast-web-3e99-a1.service")
		}, []sent{{`run spawned run=3e99 attempt=1 job=web unit=holdfast-web-3e99-a1.service`, journal.PriInfo,
			map[string]string{"HOLDFAST_RUN": "3e99", "HOLDFAST_ATTEMPT": "1", "HOLDFAST_JOB": "web", "HOLDFAST_UNIT": "holdfast-web-3e99-a1.service"}}}},
		{"levels map to priorities", func(l *slog.Logger) {
			l.Debug("d")
			l.Warn("w")
			l.Error("e", "err", errors.New("connect: refused"))
		}, []sent{
			{"d", journal.PriDebug, map[string]string{}},
			{"w", journal.PriWarning, map[string]string{}},
			{`e err="connect: refused"`, journal.PriErr, map[string]string{"HOLDFAST_ERR": "connect: refused"}},
		}},
		{"keys become field names journald accepts", func(l *slog.Logger) {
			l.Info("sweep", "journal_lag_bytes", 5, "state-dir", "/var/lib/holdfast")
		}, []sent{{"sweep journal_lag_bytes=5 state-dir=/var/lib/holdfast", journal.PriInfo,
			map[string]string{"HOLDFAST_JOURNAL_LAG_BYTES": "5", "HOLDFAST_STATE_DIR": "/var/lib/holdfast"}}}},
		{"attributes and groups of the logger are kept", func(l *slog.Logger) {
			l.With("run", "r1").WithGroup("stats").Info("pass", "runs", 2, slog.Group("systemd", "calls", 1))
		}, []sent{{"pass run=r1 stats.runs=2 stats.systemd.calls=1", journal.PriInfo,
			map[string]string{"HOLDFAST_RUN": "r1", "HOLDFAST_STATS_RUNS": "2", "HOLDFAST_STATS_SYSTEMD_CALLS": "1"}}}},
		{"a value with a newline stays on the message's line", func(l *slog.Logger) {
			l.Warn("repair failed", "err", "line one\nline \"two\"")
		}, []sent{{`repair failed err="line one\nline \"two\""`, journal.PriWarning,
			map[string]string{"HOLDFAST_ERR": "line one\nline \"two\""}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, got := capture(slog.LevelDebug)
			tt.log(l)
			if len(*got) != len(tt.want) {
				t.Fatalf("sent %d entries, want %d: %+v", len(*got), len(tt.want), *got)
			}
			for i, w := range tt.want {
				g := (*got)[i]
				if g.message != w.message || g.priority != w.priority || !maps.Equal(g.fields, w.fields) {
					t.Errorf("entry %d = %+v, want %+v", i, g, w)
				}
			}
		})
	}
}

func TestLevel(t *testing.T) {
	l, got := capture(slog.LevelWarn)
	l.Info("not sent")
	l.Warn("sent")
	if len(*got) != 1 || (*got)[0].message != "sent" {
		t.Fatalf("sent %+v, want only the warning", *got)
	}
}
