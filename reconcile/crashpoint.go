package reconcile

// CrashPoints names the places where the daemon dying leaves a step half done. Builds with the
// holdfast_crashpoints tag kill the daemon at the point HOLDFAST_CRASH_AT names, so tests can
// prove that the next daemon finishes every step; other builds compile the hook to nothing.
var CrashPoints = []string{
	"spawn-before-claim", // admitted, nothing recorded by the daemon yet
	"spawn-claimed",      // unit name and spawn claim recorded, systemd not asked
	"spawn-started",      // unit started, run not yet marked running
	"finish-before",      // marker read, ending not written
	"finish-after",       // ending written
	"restart-before",     // interruption seen, next attempt not opened
	"restart-after",      // next attempt opened, not spawned
}

// crash is called at each of CrashPoints.
var crash = func(point string) {}
