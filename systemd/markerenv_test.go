package systemd

import (
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
)

func TestMarkerFromEnv(t *testing.T) {
	run := uuid.New()
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.FixedZone("x", 3600))
	cases := []struct {
		name    string
		attempt int
		env     map[string]string
		wantErr string
	}{
		{"exited", 1, map[string]string{"SERVICE_RESULT": "success", "EXIT_CODE": "exited", "EXIT_STATUS": "0"}, ""},
		{"killed by a signal", 2, map[string]string{"SERVICE_RESULT": "signal", "EXIT_CODE": "killed", "EXIT_STATUS": "KILL"}, ""},
		{"not from systemd", 1, map[string]string{}, "SERVICE_RESULT is not set"},
		{"status not a number", 1, map[string]string{"SERVICE_RESULT": "exit-code", "EXIT_CODE": "exited", "EXIT_STATUS": "x"}, `EXIT_STATUS "x" is not a number`},
		{"no attempt", 0, map[string]string{"SERVICE_RESULT": "success"}, "attempt 0: an attempt's number is at least 1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m, err := MarkerFromEnv(run, c.attempt, "u.service", func(k string) string { return c.env[k] }, at)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("err = %v, want %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if m.Run != run || m.Attempt != c.attempt || m.Unit != "u.service" || m.ServiceResult != c.env["SERVICE_RESULT"] ||
				m.ExitCode != c.env["EXIT_CODE"] || m.ExitStatus != c.env["EXIT_STATUS"] || !m.At.Equal(at) || m.At.Location() != time.UTC {
				t.Fatalf("marker = %+v", m)
			}
		})
	}
}
