// Package runctl is what a client does to runs from outside the daemon: admit a run asked for
// now (StartRun, which the daemon also carries out for the CLI over its control socket), follow
// a run until its record is final (WaitRun), record an operator's stop and ask systemd to stop
// the run's unit (StopRun), check and admit a restore (Restore, which the dashboard's restores
// go through too), and resolve the programs a run executes (CheckExecutable, ResticBinary).
//
// Its contract: it acts only through the store and, for a stop, the systemd manager it is given
// (Store and Units, the calls it makes), so any process with the database's address may use it,
// the daemon not running included. It keeps no state between calls and starts nothing that
// outlives one: a wait cut short leaves the run going on, and a stop is safe in the database
// before systemd is asked, so the daemon's next pass carries out a stop that systemd did not
// take. The daemon (package supervisor) uses only
// its program checks, StartRun through package control, and Restore for the dashboard.
package runctl
