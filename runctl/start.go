package runctl

import (
	"context"
	"errors"

	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/store"
)

// StartParams is a run asked for now (`run start`): of Job, of Kind, with Verify's figures for a
// verification. With Wait, a run no live daemon could take is refused instead of queued.
type StartParams struct {
	Job    string
	Kind   model.Kind
	Verify model.Verify
	Wait   bool
	// By is the host of the daemon that admits the run and spawns it at once if that host may
	// run the job: then no other daemon is woken for it. "" (the CLI admitting through the
	// database, or a daemon that leaves its runs to its pass) wakes the daemons that may run it.
	By string
}

// Started is a run admitted by StartRun. Unable says why no live daemon can take it yet ("" one
// can): it waits until then.
type Started struct {
	Run    model.Run
	Unable string
}

// UnavailableError refuses a run asked for with Wait that no live daemon could take: waiting
// for it would wait for ever. Nothing was queued.
type UnavailableError struct{ Why string }

func (e *UnavailableError) Error() string { return e.Why + "; nothing was queued" }

// StartStore is what StartRun asks of the database.
type StartStore interface {
	JobRunnable(ctx context.Context, p store.JobRunnableParams) (model.Runnable, error)
	RunAdmit(ctx context.Context, p store.RunAdmitParams) (model.Run, error)
}

// StartRun admits a manual run of p.Job, as `run start` does whether the CLI or the daemon (for
// the CLI, over its control socket) carries it out.
func StartRun(ctx context.Context, st StartStore, p StartParams) (Started, error) {
	// One read when the admitting daemon's host may run the job, as it mostly may (On "" is
	// any host); else the host that may is looked for as for any admission.
	able, err := st.JobRunnable(ctx, store.JobRunnableParams{Job: p.Job, On: p.By, Deletes: p.Kind.Spec().Deletes})
	if err != nil {
		return Started{}, err
	}
	by := p.By
	if by != "" && able.Host != by {
		by = ""
		if able, err = st.JobRunnable(ctx, store.JobRunnableParams{Job: p.Job, Deletes: p.Kind.Spec().Deletes}); err != nil {
			return Started{}, err
		}
	}
	if able.Host == "" && p.Wait {
		return Started{}, &UnavailableError{Why: able.Why}
	}
	run, err := st.RunAdmit(ctx, store.RunAdmitParams{Job: p.Job, Trigger: model.TriggerManual, Kind: p.Kind, Verify: p.Verify,
		AdmittedBy: by})
	if err != nil {
		return Started{}, err
	}
	s := Started{Run: run}
	if able.Host == "" {
		s.Unable = able.Why
	}
	return s, nil
}

// Input reports whether err refuses what was asked (a job that does not exist, one that cannot
// take the run now): the asker's to change, not a failure of holdfast's.
func Input(err error) bool {
	var conflict *store.ConflictError
	var refused *RefusedError
	return errors.As(err, &conflict) || errors.As(err, &refused) || errors.Is(err, store.ErrNotFound)
}
