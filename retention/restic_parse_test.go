package retention

import (
	"strings"
	"testing"
	"time"
)

func TestParseResticSnapshots(t *testing.T) {
	snaps, err := ParseResticSnapshots([]byte(`[
		{"time":"2021-01-04T10:00:00Z","parent":"02a0","tree":"12cd","paths":["/tmp/rx/data"],"hostname":"h1","username":"root","tags":["holdfast-job=a"],"id":"4c791751d38446ef1b594658859e3702fd44eb5855be153ea4b00a11aef6f0e9","short_id":"4c791751"},
		{"time":"2021-01-03T11:00:00.5+01:00","tree":"12cd","paths":["/a","/b"],"hostname":"h2","id":"02a0bc5c00000000000000000000000000000000000000000000000000000000","short_id":"02a0bc5c"}
	]`))
	if err != nil {
		t.Fatal(err)
	}
	if len(snaps) != 2 {
		t.Fatalf("got %d snapshots, want 2", len(snaps))
	}
	s := snaps[0]
	if s.ID != "4c791751d38446ef1b594658859e3702fd44eb5855be153ea4b00a11aef6f0e9" || !s.Time.Equal(time.Date(2021, 1, 4, 10, 0, 0, 0, time.UTC)) ||
		s.Host != "h1" || len(s.Tags) != 1 || s.Tags[0] != "holdfast-job=a" || len(s.Paths) != 1 {
		t.Errorf("first snapshot = %+v", s)
	}
	if s := snaps[1]; !s.Time.Equal(time.Date(2021, 1, 3, 10, 0, 0, 5e8, time.UTC)) || s.Tags != nil || len(s.Paths) != 2 {
		t.Errorf("second snapshot = %+v", s)
	}
	if snaps, err := ParseResticSnapshots([]byte("[]")); err != nil || len(snaps) != 0 {
		t.Errorf("empty list: %v, %v", snaps, err)
	}

	bad := []struct{ in, want string }{
		{``, "not the JSON array restic snapshots --json prints"},
		{`{"id":"a"}`, "not the JSON array"},
		{`[{"id":"a","time":"yesterday"}]`, "not the JSON array"},
		{`[{"id":"a","time":"2021-01-04T10:00:00Z"}`, "not the JSON array"},
		{`[{"time":"2021-01-04T10:00:00Z"}]`, `entry 1: id "" is not a full restic id`},
		{`[null]`, `entry 1: id "" is not a full restic id`},
		{`[{"id":"abc","time":"2021-01-04T10:00:00Z"}]`, `entry 1: id "abc" is not a full restic id`},
		{`[{"id":"` + strings.Repeat("ab", 32) + `"}]`, "snapshot abababab has no time"},
		{`[{"group_key":{"hostname":"h1"},"snapshots":[]}]`, "entry 1 is a group: list the snapshots without --group-by"},
	}
	for _, tt := range bad {
		_, err := ParseResticSnapshots([]byte(tt.in))
		if err == nil || !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("ParseResticSnapshots(%q) error = %v, want one line containing %q", tt.in, err, tt.want)
		}
	}
}
