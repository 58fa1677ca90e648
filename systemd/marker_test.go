package systemd

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
)

func TestMarkerRoundTrip(t *testing.T) {
	dir := t.TempDir()
	run := uuid.New()
	want := Marker{Run: run, Attempt: 2, Unit: "holdfast-x.service", ServiceResult: "exit-code",
		ExitCode: "exited", ExitStatus: "3", At: time.Now().UTC().Truncate(time.Millisecond)}
	if _, err := ReadMarker(dir, run, 2); !errors.Is(err, ErrNoMarker) {
		t.Fatalf("before write: err = %v, want ErrNoMarker", err)
	}
	if err := WriteMarker(dir, want); err != nil {
		t.Fatal(err)
	}
	got, err := ReadMarker(dir, run, 2)
	if err != nil {
		t.Fatal(err)
	}
	if !got.At.Equal(want.At) {
		t.Fatalf("at = %v, want %v", got.At, want.At)
	}
	got.At = want.At
	if got != want {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	// No temporary files are left beside it.
	entries, _ := os.ReadDir(filepath.Dir(MarkerPath(dir, run, 2)))
	if len(entries) != 1 {
		t.Fatalf("markers dir has %d entries, want 1", len(entries))
	}
	if _, err := ReadMarker(dir, run, 1); !errors.Is(err, ErrNoMarker) {
		t.Fatalf("other attempt: err = %v, want ErrNoMarker", err)
	}
}

func TestMarkerUnreadable(t *testing.T) {
	run := uuid.New()
	other := uuid.New()
	cases := []struct {
		name, content string
	}{
		{"empty", ""},
		{"truncated", `{"run":"` + run.String() + `","attempt":1,"service_res`},
		{"not json", "exit-code exited 3\n"},
		{"no service result", `{"run":"` + run.String() + `","attempt":1,"exit_code":"exited","exit_status":"0"}`},
		{"status not a number", `{"run":"` + run.String() + `","attempt":1,"service_result":"success","exit_code":"exited","exit_status":"x"}`},
		{"unknown exit code", `{"run":"` + run.String() + `","attempt":1,"service_result":"success","exit_code":"vanished","exit_status":"0"}`},
		{"other run", `{"run":"` + other.String() + `","attempt":1,"service_result":"success","exit_code":"exited","exit_status":"0"}`},
		{"other attempt", `{"run":"` + run.String() + `","attempt":2,"service_result":"success","exit_code":"exited","exit_status":"0"}`},
		{"binary", "\x00\x01\x02"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := MarkerPath(dir, run, 1)
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte(tc.content), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := ReadMarker(dir, run, 1)
			if !errors.Is(err, ErrMarkerUnreadable) {
				t.Fatalf("err = %v, want ErrMarkerUnreadable", err)
			}
		})
	}
}

// Something other than a regular file where the marker goes is unreadable, found without
// following it or blocking on it.
func TestMarkerNotAFile(t *testing.T) {
	run := uuid.New()
	good := `{"run":"` + run.String() + `","attempt":1,"service_result":"success","exit_code":"exited","exit_status":"0"}`
	cases := []struct {
		name  string
		place func(t *testing.T, path string) error
	}{
		{"symlink to a good marker", func(t *testing.T, path string) error {
			target := filepath.Join(t.TempDir(), "m.json")
			if err := os.WriteFile(target, []byte(good), 0o644); err != nil {
				return err
			}
			return os.Symlink(target, path)
		}},
		{"named pipe", func(t *testing.T, path string) error { return syscall.Mkfifo(path, 0o644) }},
		{"directory", func(t *testing.T, path string) error { return os.Mkdir(path, 0o755) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := MarkerPath(dir, run, 1)
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := tc.place(t, path); err != nil {
				t.Fatal(err)
			}
			if _, err := ReadMarker(dir, run, 1); !errors.Is(err, ErrMarkerUnreadable) {
				t.Fatalf("err = %v, want ErrMarkerUnreadable", err)
			}
		})
	}
}

func FuzzParseMarker(f *testing.F) {
	run := uuid.New().String()
	for _, seed := range []string{
		`{"run":"` + run + `","attempt":1,"unit":"u.service","service_result":"success","exit_code":"exited","exit_status":"0","at":"2026-11-29T10:00:00Z"}`,
		`{"run":"` + run + `","attempt":3,"service_result":"signal","exit_code":"killed","exit_status":"KILL"}`,
		`{"run":"` + run + `","attempt":1,"service_result":"exit-code","exit_code":"exited","exit_status":"130"}`,
		`{"run":"` + run + `","attempt":0}`,
		`{"run":"nope"}`,
		`[]`, `null`, ``, `{`, "\xff\xfe",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := ParseMarker(data)
		if err != nil {
			if !errors.Is(err, ErrMarkerUnreadable) {
				t.Fatalf("error %v does not wrap ErrMarkerUnreadable", err)
			}
			return
		}
		if m.Run == uuid.Nil || m.Attempt < 1 || m.ServiceResult == "" {
			t.Fatalf("accepted an invalid marker: %+v", m)
		}
	})
}
