package wake

import (
	"context"
	"testing"
	"time"
)

// Backoff doubles from first up to most, and each wait lies within half to one and a half
// times that; waits drawn many times are not all the same.
func TestBackoff(t *testing.T) {
	const first, most = 2 * time.Second, 30 * time.Second
	for _, tc := range []struct {
		failures int
		base     time.Duration
	}{
		{1, 2 * time.Second},
		{2, 4 * time.Second},
		{3, 8 * time.Second},
		{4, 16 * time.Second},
		{5, 30 * time.Second},
		{40, 30 * time.Second},
	} {
		seen := map[time.Duration]bool{}
		for range 200 {
			d := Backoff(first, most, tc.failures)
			if d < tc.base/2 || d >= tc.base*3/2 {
				t.Fatalf("failure %d: waited %v, want within [%v, %v)", tc.failures, d, tc.base/2, tc.base*3/2)
			}
			seen[d] = true
		}
		if len(seen) < 2 {
			t.Fatalf("failure %d: 200 waits were all %v: no spread", tc.failures, Backoff(first, most, tc.failures))
		}
	}
	if d := Backoff(0, 0, 1); d != 0 {
		t.Fatalf("no wait asked: waited %v", d)
	}
}

// WaitOr ends at an ask on either signal, and says asked only for the first; a pending ask
// on the other is left for the next wait.
func TestWaitOr(t *testing.T) {
	s, also := New(), New()
	ctx := context.Background()
	s.Wake()
	if alive, asked := WaitOr(ctx, time.Hour, s, also); !alive || !asked {
		t.Fatalf("ask on s: alive %v asked %v, want both", alive, asked)
	}
	also.Wake()
	if alive, asked := WaitOr(ctx, time.Hour, s, also); !alive || asked {
		t.Fatalf("ask on also: alive %v asked %v, want alive and not asked", alive, asked)
	}
	if alive, asked := WaitOr(ctx, time.Millisecond, s, also); !alive || asked {
		t.Fatalf("no ask: alive %v asked %v, want alive and not asked", alive, asked)
	}
	done, cancel := context.WithCancel(ctx)
	cancel()
	if alive, _ := WaitOr(done, time.Hour, s, also); alive {
		t.Fatal("ended context: alive")
	}
}
