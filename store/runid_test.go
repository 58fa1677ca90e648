package store_test

import (
	"testing"

	"github.com/holdfast-backup/holdfast/store"
)

// RunIDRange is the lowest and highest id a prefix of an id's text can stand for, and nothing
// for a prefix no id's text starts with.
func TestRunIDRange(t *testing.T) {
	for _, tc := range []struct {
		prefix, lo, hi string // lo "" has no range
	}{
		{"6f1c", "6f1c0000-0000-0000-0000-000000000000", "6f1cffff-ffff-ffff-ffff-ffffffffffff"},
		{"6F1C1F8E", "6f1c1f8e-0000-0000-0000-000000000000", "6f1c1f8e-ffff-ffff-ffff-ffffffffffff"},
		{"6f1c1f8e-", "6f1c1f8e-0000-0000-0000-000000000000", "6f1c1f8e-ffff-ffff-ffff-ffffffffffff"},
		{"6f1c1f8e-3d0a-4", "6f1c1f8e-3d0a-4000-0000-000000000000", "6f1c1f8e-3d0a-4fff-ffff-ffffffffffff"},
		{"6f1c1f8e-3d0a-4a44-9d7e-0b3c2f0f5a11", "6f1c1f8e-3d0a-4a44-9d7e-0b3c2f0f5a11", "6f1c1f8e-3d0a-4a44-9d7e-0b3c2f0f5a11"},
		{"6f1", "", ""},
		{"6f1c1f8e3", "", ""},
		{"6f1c-", "", ""},
		{"6f1g", "", ""},
		{"6f1%", "", ""},
		{"6f1c1f8e-3d0a-4a44-9d7e-0b3c2f0f5a110", "", ""},
	} {
		lo, hi, ok := store.RunIDRange(tc.prefix)
		switch {
		case tc.lo == "" && ok:
			t.Errorf("RunIDRange(%q) = %s..%s, want none", tc.prefix, lo, hi)
		case tc.lo != "" && (!ok || lo.String() != tc.lo || hi.String() != tc.hi):
			t.Errorf("RunIDRange(%q) = %s..%s %v, want %s..%s", tc.prefix, lo, hi, ok, tc.lo, tc.hi)
		}
	}
}
