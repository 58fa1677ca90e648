// Package crashpoint names the places where holdfast dying leaves a write half done, so tests
// can prove that the next daemon, or the same command run again, finishes it exactly once.
//
// A binary built with the holdfast_crashpoints tag SIGKILLs itself at the point that the
// environment variable HOLDFAST_CRASH_AT names (an unknown name stops it at once, exit 2); in
// other builds At compiles to nothing. A point ending in -before-commit sits inside a
// transaction, after its writes and before its commit; -after sits just after the commit.
//
// The points, in the order a run meets them. The names are stable: tests and operators' notes
// refer to them.
//
//	admit-slot-before-commit   daemon: a due slot's run inserted, next slot not yet committed
//	admit-slot-after           daemon: the slot's run and next slot committed, not logged
//	admit-prune-before-commit  daemon: a scheduled prune's (or verification's) run inserted, not committed
//	admit-prune-after          daemon: the prune's (or verification's) run and next slot committed
//	run-start-before-commit    run start: the run and its hold inserted, not committed
//	run-start-after            run start: the run committed, not reported
//	spawn-before-claim         daemon: admitted, nothing recorded by the daemon yet
//	spawn-claimed              daemon: unit name and spawn claim recorded, systemd not asked
//	spawn-started              daemon: unit started, run not yet marked running
//	spawn-armed                daemon: a scheduled unit's timer armed by systemd, nothing recorded after
//	journal-applied            daemon: a journal batch and its cursor committed, the rest unread
//	quarantine-before          daemon: a journal found unreadable, quarantine not recorded
//	quarantine-after           daemon: quarantine recorded
//	stop-recorded              run stop: the stop intent committed, systemd not asked
//	finish-before              daemon: marker read, ending not written
//	retry-before-commit        daemon: ending and retry run written, not committed
//	finish-after               daemon: ending written (with a backup's snapshot in the inventory)
//	retry-after                daemon: ending and retry run committed
//	inventory-before-commit    daemon or CLI: the repository's snapshot listing written, not committed
//	restart-before             daemon: interruption seen, next attempt not opened
//	restart-after              daemon: next attempt opened, not spawned
//	grant-before-commit        account grant: the grant written, not committed
//	grant-after                account grant: the grant committed, not reported
//	resume-before-commit       run resume: the new attempt and its hold written, not committed
//	resume-after               run resume: committed, not reported
//	settle-before-commit       ledger settle: the settlement written, not committed
//	settle-after               ledger settle: committed, not reported
//	retention-apply-before     retention apply: plan made, not recorded
//	retention-apply-after      retention apply: plan and its forget run committed, not reported
//	protect-before-commit      snapshot hold/release/lock: the change written, not committed
//	protect-after              snapshot hold/release/lock: committed, not reported
//	job-edit-before-commit     job edit: the job's new settings written, not committed
//	job-remove-before-commit   job remove: the job deleted, not committed
package crashpoint

// Points lists every crash point, as the package comment does.
var Points = []string{
	"admit-slot-before-commit",
	"admit-slot-after",
	"admit-prune-before-commit",
	"admit-prune-after",
	"run-start-before-commit",
	"run-start-after",
	"spawn-before-claim",
	"spawn-claimed",
	"spawn-started",
	"spawn-armed",
	"journal-applied",
	"quarantine-before",
	"quarantine-after",
	"stop-recorded",
	"finish-before",
	"retry-before-commit",
	"finish-after",
	"retry-after",
	"inventory-before-commit",
	"restart-before",
	"restart-after",
	"grant-before-commit",
	"grant-after",
	"resume-before-commit",
	"resume-after",
	"settle-before-commit",
	"settle-after",
	"retention-apply-before",
	"retention-apply-after",
	"protect-before-commit",
	"protect-after",
	"job-edit-before-commit",
	"job-remove-before-commit",
}

// Env is the environment variable that names the point to crash at.
const Env = "HOLDFAST_CRASH_AT"
