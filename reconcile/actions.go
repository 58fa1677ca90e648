package reconcile

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/holdfast-backup/holdfast/crashpoint"
	"github.com/holdfast-backup/holdfast/engine"
	"github.com/holdfast-backup/holdfast/inventory"
	"github.com/holdfast-backup/holdfast/jobdef"
	"github.com/holdfast-backup/holdfast/jobunit"
	"github.com/holdfast-backup/holdfast/journal"
	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/store"
	"github.com/holdfast-backup/holdfast/systemd"
)

// disarm stops an armed attempt's timer, then its service, and closes the run with v. The
// service is stopped too in case the timer elapsed meanwhile: then it is ended, not left.
func (r *Reconciler) disarm(ctx context.Context, l model.LiveRun, f facts, v verdict) error {
	for _, name := range []string{systemd.TimerName(f.unitName), f.unitName} {
		if err := r.cfg.Runner.Stop(ctx, name); err != nil {
			return err // nothing is closed while the timer may still start it
		}
	}
	return r.finish(ctx, l, f.ended, v)
}

// missingIdentity returns the reason a job cannot run because its user or group does not exist
// on this host, or "".
func missingIdentity(job model.Job) (string, error) {
	if job.User != "" {
		if _, err := jobdef.LookupUser(job.User); errors.Is(err, jobdef.ErrUnknownUser) {
			return fmt.Sprintf("job user %s does not exist on this host", job.User), nil
		} else if err != nil {
			return "", err
		}
	}
	if job.Group != "" {
		if _, err := jobdef.LookupGroup(job.Group); errors.Is(err, jobdef.ErrUnknownUser) {
			return fmt.Sprintf("job group %s does not exist on this host", job.Group), nil
		} else if err != nil {
			return "", err
		}
	}
	return "", nil
}

// finishFromMarker closes a run whose unit left a readable marker.
func (r *Reconciler) finishFromMarker(ctx context.Context, l model.LiveRun, m systemd.Marker, eng classifier) error {
	a, err := r.cfg.Store.AttemptGet(ctx, l.Ref())
	if err != nil {
		return err // nothing is closed on facts we could not read
	}
	ev := evidence(a)
	ev.Operation = l.Run.Operation()
	v := outcome(m, ev, eng, l.Run.StopRequestedAt != nil, l.Run.StopReason, l.Run.PausedReason)
	k, err := endingOf(l.Run)
	if err != nil {
		return err
	}
	if k.succeeded != nil && v.status == model.StatusSucceeded {
		if reason := k.succeeded(l, a); reason != "" {
			v.reason = reason
		}
	}
	if k.close != nil {
		return k.close(r, ctx, l, a, m, v)
	}
	return r.finishAttempt(ctx, l, a, m, v)
}

// shortID is a snapshot's id as restic abbreviates it.
func shortID(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}

// repairAndFinish closes a run whose journal recorded no summary, with what the repository says
// about the run's snapshot (repair).
func (r *Reconciler) repairAndFinish(ctx context.Context, l model.LiveRun, a model.Attempt, m systemd.Marker, v verdict) error {
	job, err := r.cfg.Store.JobGet(ctx, l.Run.JobName)
	if err != nil {
		return err
	}
	v.snapshotID, v.snapshot, v.reason = r.repair(ctx, job, l.Run.ID, v.reason)
	return r.finishBackup(ctx, l, a, m, v)
}

// finishBackup closes a backup run with v. A restic backup that succeeded or was partial made a
// snapshot: it enters the inventory with the ending, in its transaction, from the backup's own
// summary (or from the repair channel's listing, already in v). The repository is not listed
// again after a backup: that costs a unit and restic's key derivation (most of a second), and
// every retention plan and `snapshot list --refresh` lists it first anyway.
func (r *Reconciler) finishBackup(ctx context.Context, l model.LiveRun, a model.Attempt, m systemd.Marker, v verdict) error {
	made := v.status == model.StatusSucceeded || v.status == model.StatusPartial
	if s := summary(a); v.snapshot == nil && made && l.JobEngine == engine.NameRestic && s != nil && s.SnapshotID != "" {
		job, err := r.cfg.Store.JobGet(ctx, l.Run.JobName)
		switch {
		case errors.Is(err, store.ErrNotFound): // removed: no inventory row; a listing finds the snapshot
		case err != nil:
			return err // nothing is closed on facts we could not read
		default:
			v.snapshot = inventory.FromSummary(job, l.Run.ID, a, s.SnapshotID, r.hostname, l.Now())
		}
	}
	return r.finishAttempt(ctx, l, a, m, v)
}

// refreshAfter reads the repository's snapshots again after a forget run changed them. A
// failure only costs freshness: every plan reads the repository again before it decides. It is
// the repair channel's work, not the pass's: asking restic costs a unit and the derivation of
// the repository's key (most of a second), which the runs behind this one need not wait for.
func (r *Reconciler) refreshAfter(ctx context.Context, l model.LiveRun) {
	if l.JobEngine != engine.NameRestic {
		return
	}
	// Its own key: the attempt's repair may be the very task that asks for this refresh.
	key := model.AttemptRef{Run: l.Run.ID, No: -l.Attempt.No}
	refresh := func(ctx context.Context, _ func()) error {
		job, err := r.cfg.Store.JobGet(ctx, l.Run.JobName)
		if err == nil { // the repository the run worked on
			_, err = inventory.Refresh(ctx, r.cfg.inventoryConfig(), job.For(l.Run))
		}
		if err != nil {
			r.cfg.Logger.Warn("snapshot inventory not refreshed", "run", l.Run.ID, "err", err)
		}
		return nil // no pass tries again: the next plan or --refresh reads the repository
	}
	if err := r.repairs.Submit(ctx, key, refresh); err != nil {
		r.cfg.Logger.Warn("snapshot inventory not refreshed", "run", l.Run.ID, "err", err)
	}
}

// repair asks the repository which snapshot the run made, when the journal cannot say (it was
// lost or quarantined). It is asked once, as the run ends; the byte figures stay unknown. The
// snapshot found is returned as restic listed it, for the inventory.
func (r *Reconciler) repair(ctx context.Context, job model.Job, run uuid.UUID, reason string) (snapshotID string, snap *model.Snapshot, newReason string) {
	restic, ej := JobRestic(r.cfg, job)
	snaps, err := restic.RunSnapshots(ctx, ej, run)
	switch {
	case err != nil:
		r.cfg.Logger.Warn("repair channel failed", "run", run, "err", err)
		return "", nil, reason + "; the journal recorded no summary and the repository could not be asked"
	case len(snaps) == 0:
		return "", nil, reason + "; the journal recorded no summary and the repository has no snapshot tagged with this run"
	}
	last := snaps[len(snaps)-1]
	listed := inventory.Listed(job.Repository, last)
	return last.ShortID, &listed, reason + fmt.Sprintf("; snapshot %s found in the repository by the run's tag (the journal recorded no summary; byte figures unknown)", last.ShortID)
}

// finish closes a run on a verdict reached without a readable marker.
func (r *Reconciler) finish(ctx context.Context, l model.LiveRun, m systemd.Marker, v verdict) error {
	a, err := r.cfg.Store.AttemptGet(ctx, l.Ref())
	if err != nil {
		return err
	}
	return r.finishAttempt(ctx, l, a, m, v)
}

func (r *Reconciler) finishAttempt(ctx context.Context, l model.LiveRun, a model.Attempt, m systemd.Marker, v verdict) (err error) {
	// No At: the database stamps the ending on its own clock, which the retry's delay, stalls and
	// other writers' spans are measured on.
	e := model.Ending{
		RunID: l.Run.ID, Attempt: l.Attempt.No,
		Status: v.status, Reason: v.reason, FailureClass: v.class,
		ServiceResult: m.ServiceResult, ExitCode: m.ExitCode, ExitStatus: m.ExitStatus,
		FilesSkipped: a.ItemErrors,
	}
	if v.status == model.StatusPaused {
		e.PausedReason = l.Run.PausedReason
	}
	e.SnapshotID, e.Snapshot = v.snapshotID, v.snapshot
	// Absent is not zero: without the engine's summary the figures stay unknown.
	if s, note := checkedSummary(a); s != nil {
		e.SnapshotID = s.SnapshotID
		e.Reason += note
		if k, err := endingOf(l.Run); err == nil && k.figures {
			// A drill's summary names its snapshot, but it added and processed nothing of a backup's.
			e.BytesAdded, e.BytesProcessed, e.FilesProcessed = &s.DataAdded, &s.TotalBytesProcessed, &s.TotalFilesProcessed
		}
	}
	if a.HookError != "" {
		e.Reason += "; " + a.HookError // recorded, never the outcome
	}
	e.Settlement = r.settlement(ctx, l, a, !v.neverRan && ran(a, m), false)
	crashpoint.At("finish-before")
	if v.status == model.StatusFailed && v.class == string(engine.Transient) {
		// The backoff counts from the recorded end; AttemptFinish adds the retry to the reason.
		if e.Retry, err = r.retryPlan(ctx, l); err != nil {
			return err
		}
	}
	done, err := r.cfg.Store.AttemptFinish(ctx, r.fence(), e)
	if err != nil {
		return err
	}
	r.runaway.Unwatch(l.Ref())
	crashpoint.At("finish-after")
	if done && e.Retry != nil {
		crashpoint.At("retry-after")
	}
	if done {
		r.cfg.Logger.Info("run finished", "run", l.Run.ID, "attempt", l.Attempt.No, "status", v.status, "reason", v.reason)
		if r.cfg.Observer != nil {
			r.cfg.Observer.RunEnded(l.Run, v.status, l.Now())
		}
	}
	return nil
}

// restart ends the attempt and opens the next one.
func (r *Reconciler) restart(ctx context.Context, l model.LiveRun, m systemd.Marker) error {
	a, err := r.cfg.Store.AttemptGet(ctx, l.Ref())
	if err != nil {
		return err
	}
	settlement := r.settlement(ctx, l, a, ran(a, m), true)
	crashpoint.At("restart-before")
	moved, paused, err := r.cfg.Store.AttemptRestart(ctx, r.fence(), model.Restarting{RunID: l.Run.ID, Attempt: l.Attempt.No,
		ServiceResult: m.ServiceResult, ExitCode: m.ExitCode, ExitStatus: m.ExitStatus, Settlement: settlement})
	if err != nil {
		return err
	}
	crashpoint.At("restart-after")
	r.runaway.Unwatch(l.Ref())
	switch {
	case moved && paused != "":
		r.cfg.Logger.Warn("run not restarted", "run", l.Run.ID, "after_attempt", l.Attempt.No, "reason", paused)
	case moved:
		r.cfg.Logger.Info("run restarted", "run", l.Run.ID, "after_attempt", l.Attempt.No, "cause", interruption(m))
	}
	return nil
}

func interruption(m systemd.Marker) string {
	if m.ServiceResult == "" {
		return "the unit vanished without an exit marker"
	}
	return fmt.Sprintf("the engine was interrupted (%s %s %s)", m.ServiceResult, m.ExitCode, m.ExitStatus)
}

// summary is the attempt's summary, its snapshot id checked (checkedSummary).
func summary(a model.Attempt) *engine.Summary {
	s, _ := checkedSummary(a)
	return s
}

func evidence(a model.Attempt) engine.Evidence {
	return engine.Evidence{Summary: summary(a), ItemErrors: a.ItemErrors, FirstItemError: a.FirstItemError, Fatal: a.Fatal}
}

// maxDrain bounds the journal bytes one pass applies for one run: a huge journal is taken in
// over several passes instead of holding one.
const maxDrain int64 = 64 << 20

// maxText bounds a message from the journal (first item error, fatal message) kept in a text
// column: the journal is the job user's, and a reason is one line for people.
const maxText = 1024

// drain applies what the attempt's journal says since the stored cursor, at most maxDrain bytes,
// and returns the bytes still unread. For a journal that cannot be read, or whose events the
// database cannot store, it returns why instead: decide quarantines it; the run goes on.
func (r *Reconciler) drain(ctx context.Context, l model.LiveRun, pass *passReads) (lag int64, problem string, err error) {
	if l.Attempt.QuarantinedAt != nil || l.Attempt.Unit == "" {
		return 0, "", nil
	}
	uid, err := pass.lookup(l.JobUser)
	if err != nil {
		return 0, "", fmt.Errorf("owner of the journal of run %s: %w", l.Run.ID, err)
	}
	src := jobunit.JournalSource(r.cfg.StateDir, l.Run.ID, l.Attempt.No, uid)
	if pass != nil {
		src.Root = pass.stateDir
	}
	cursor := l.Attempt.Cursor
	limit := cmp.Or(r.drainLimit, maxDrain)
	var size int64
	for drained := int64(0); drained < limit; {
		batch, err := journal.ReadBatch(src, cursor, l.Run.ID, l.Attempt.No, 0)
		events, next := batch.Events, batch.Next
		size = batch.Size
		if len(events) > 0 {
			step := store.AttemptApplyJournalParams{Ref: l.Ref(), From: cursor, To: next, Delta: delta(events)}
			applied, aerr := r.cfg.Store.AttemptApplyJournal(ctx, r.fence(), step)
			var refused *store.RefusedError
			if errors.As(aerr, &refused) {
				return 0, fmt.Sprintf("lines %d to %d from byte %d: %v", cursor.LastSeq+1, next.LastSeq, cursor.Offset, refused), nil
			}
			if aerr != nil {
				return 0, "", aerr
			}
			if !applied {
				return 0, "", nil // another pass moved the cursor; it owns this batch
			}
			crashpoint.At("journal-applied")
			drained += next.Offset - cursor.Offset
			cursor = next
		}
		if err != nil {
			if errors.Is(err, journal.ErrNotYet) {
				return 0, "", nil
			}
			var ce *journal.CorruptError
			if errors.As(err, &ce) {
				return 0, ce.Reason, nil
			}
			return 0, "", err
		}
		if len(events) == 0 {
			break
		}
	}
	return max(0, size-cursor.Offset), "", nil
}

// quarantine stops the projection of the attempt's journal for reason, which names what is wrong
// and never quotes the journal.
func (r *Reconciler) quarantine(ctx context.Context, l model.LiveRun, reason string) error {
	r.cfg.Logger.Error("run journal quarantined; the run goes on without progress figures",
		"run", l.Run.ID, "attempt", l.Attempt.No, "reason", reason)
	crashpoint.At("quarantine-before")
	if err := r.cfg.Store.AttemptQuarantine(ctx, r.fence(), store.AttemptQuarantineParams{Ref: l.Ref(), Reason: reason}); err != nil {
		return err
	}
	crashpoint.At("quarantine-after")
	return nil
}

// delta folds a batch of journal events into what the projection gains.
func delta(events []journal.Event) model.JournalDelta {
	var d model.JournalDelta
	for _, e := range events {
		at := e.Time
		d.LastEventAt = &at
		switch e.Type {
		case engine.TypeProgress:
			var p engine.Progress
			if json.Unmarshal(e.Payload, &p) == nil {
				d.Progress = &model.Progress{PercentDone: p.PercentDone, FilesDone: p.FilesDone,
					TotalFiles: p.TotalFiles, BytesDone: p.BytesDone, TotalBytes: p.TotalBytes}
			}
		case engine.TypeItemError:
			var ie engine.ItemError
			if json.Unmarshal(e.Payload, &ie) == nil {
				d.ItemErrors++
				if d.FirstItemError == "" {
					d.FirstItemError = clipText(ie.String(), maxText)
				}
			}
		case engine.TypeFatal:
			var f engine.Fatal
			if json.Unmarshal(e.Payload, &f) == nil && d.Fatal == "" {
				d.Fatal = clipText(f.Message, maxText)
			}
		case engine.TypeSummary:
			d.Summary = storedSummary(e.Payload)
		case engine.TypeHookError:
			var h engine.HookError
			if json.Unmarshal(e.Payload, &h) == nil && d.HookError == "" {
				d.HookError = clipText(h.Message, maxText)
			}
		}
	}
	return d
}

// clipText shortens s to at most n bytes, at a rune boundary.
func clipText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// passReads is what one pass reads, opens or looks up once for all its runs: the jobs this host
// may spawn, systemd's answer, the job users' uids (looking a user up reads the user database,
// NSS, which costs more than the rest of a quiet run's pass), the state directory, below which
// the journals are, and the markers directory. A nil passReads, or a nil directory (it could not
// be opened), looks up and opens every time.
type passReads struct {
	jobs      map[string]model.Job
	states    map[string]systemd.State
	statesErr error // why systemd's answer is missing

	mu       sync.Mutex
	uids     map[string]uidLookup
	stateDir *journal.Root
	markers  *systemd.Markers
}

// openDirs opens the journals' root and the marker directory under stateDir for the reads of
// the runs, where it can (a read opens by path otherwise); closeDirs closes them.
func (c *passReads) openDirs(stateDir string) {
	if root, err := journal.OpenRoot(stateDir); err == nil {
		c.stateDir = root
	}
	if markers, err := systemd.OpenMarkers(stateDir); err == nil {
		c.markers = markers
	}
}

func (c *passReads) closeDirs() {
	if c.stateDir != nil {
		c.stateDir.Close()
	}
	if c.markers != nil {
		c.markers.Close()
	}
}

type uidLookup struct {
	uid int
	err error
}

func (c *passReads) lookup(user string) (int, error) {
	if c == nil {
		uid, _, err := jobunit.UserIdentity(user)
		return uid, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if found, ok := c.uids[user]; ok {
		return found.uid, found.err
	}
	uid, _, err := jobunit.UserIdentity(user)
	if c.uids == nil {
		c.uids = map[string]uidLookup{}
	}
	c.uids[user] = uidLookup{uid, err}
	return uid, err
}
