package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/holdfast-backup/holdfast/crashpoint"
	"github.com/holdfast-backup/holdfast/ledger"
	"github.com/holdfast-backup/holdfast/model"
)

// Paused reasons the ledger gives a run (see package ledger).
const (
	PausedQuotaExhausted     = ledger.PausedQuotaExhausted
	PausedRunCeiling         = ledger.PausedRunCeiling
	PausedSettlementDeferred = ledger.PausedSettlementDeferred
)

// DefaultAccount is the account of jobs that name none. It has no quota until given one.
const DefaultAccount = "default"

// accountColumns reads account a (accounts a) with its sums as its entries give them: inside a
// transaction that writes entries, where the sums kept on its row (accountKeptColumns) wait for
// the commit (migration 00036).
const accountColumns = `a.name, a.created_at, a.unlimited, a.allowance_bytes, coalesce(a.allowance_period, ''),
	` + accountGranted + `::bigint, ` + accountSettled + `::bigint, ` + accountHeld + `::bigint`

// accountKeptColumns reads account a with the sums kept on its row as each entry commits: one
// row whatever the account's history, for every read outside a writing transaction. The
// invariant "an account's kept sums are its entries'" holds them to accountColumns.
const accountKeptColumns = `a.name, a.created_at, a.unlimited, a.allowance_bytes, coalesce(a.allowance_period, ''),
	a.granted_bytes, a.settled_bytes, a.held_bytes`

// accountGranted and accountSettled are what account a (accounts a) was granted and charged:
// its entries, and those a compaction folded into its checkpoint (HistoryCompact).
const (
	accountGranted = `(coalesce((SELECT sum(bytes) FROM ledger_entries WHERE account = a.name AND kind = 'grant'), 0)
		+ coalesce((SELECT k.granted_bytes FROM ledger_checkpoints k WHERE k.account = a.name), 0))`
	accountSettled = `(coalesce((SELECT sum(bytes) FROM ledger_entries WHERE account = a.name AND kind IN ('settle', 'recovered')), 0)
		+ coalesce((SELECT k.settled_bytes FROM ledger_checkpoints k WHERE k.account = a.name), 0))`
	// accountHeld is what account a holds: its holds that no settlement or release closed.
	accountHeld = `coalesce((SELECT sum(bytes) FROM open_holds WHERE account = a.name), 0)`
)

func scanAccount(row pgx.Row) (model.Account, error) {
	var a model.Account
	err := row.Scan(&a.Name, &a.CreatedAt, &a.Unlimited, &a.AllowanceBytes, &a.AllowancePeriod,
		&a.GrantedBytes, &a.SettledBytes, &a.HeldBytes)
	return a, err
}

// AccountCreateParams is an account to add.
type AccountCreateParams struct {
	Name      string
	Quota     *int64 // its initial grant; nil: no quota at all
	Allowance *int64 // per Period, on top of the quota; nil for none
	Period    string // day, week or month
	Actor     string // who adds it
}

// AccountCreate adds an account with an initial grant of its quota.
func (s *Store) AccountCreate(ctx context.Context, a AccountCreateParams) (model.Account, error) {
	var out model.Account
	err := inTx(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		out, err = createAccount(ctx, tx, a)
		return err
	})
	if err != nil {
		return model.Account{}, wrap(err, "create account %s", a.Name)
	}
	return out, nil
}

func createAccount(ctx context.Context, tx pgx.Tx, a AccountCreateParams) (model.Account, error) {
	name, quota, actor := a.Name, a.Quota, a.Actor
	_, err := tx.Exec(ctx, `INSERT INTO accounts (name, unlimited, allowance_bytes, allowance_period)
		VALUES ($1, $2, $3, nullif($4, ''))`, name, quota == nil, a.Allowance, a.Period)
	if isUniqueViolation(err) {
		return model.Account{}, &ConflictError{Msg: fmt.Sprintf("account %s already exists (holdfast account grant %s SIZE adds to it)", name, name)}
	}
	if err != nil {
		return model.Account{}, err
	}
	if quota != nil {
		if _, err := tx.Exec(ctx, `INSERT INTO ledger_entries (account, kind, bytes, actor, note)
			VALUES ($1, 'grant', $2, $3, 'initial quota')`, name, *quota, actor); err != nil {
			return model.Account{}, err
		}
	}
	return scanAccount(tx.QueryRow(ctx, `SELECT `+accountColumns+` FROM accounts a WHERE a.name = $1`, name))
}

// AccountGrantParams is a grant AccountGrant adds to an account.
type AccountGrantParams struct {
	Name  string // the account
	Bytes int64  // added to its quota
	Actor string // who grants
	Note  string // recorded with the grant
}

// AccountGrant adds p.Bytes to an account's quota. An account without a quota gets one, on top
// of what it already used: what it settled and holds is granted first, so its balance starts at
// p.Bytes.
func (s *Store) AccountGrant(ctx context.Context, p AccountGrantParams) (model.Account, error) {
	var out model.Account
	err := inTx(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		out, err = grant(ctx, tx, p.Name, p.Bytes, p.Actor, p.Note)
		return err
	})
	if err != nil {
		return model.Account{}, wrap(err, "grant to account %s", p.Name)
	}
	crashpoint.At("grant-after")
	return out, nil
}

func grant(ctx context.Context, tx pgx.Tx, name string, bytes int64, actor, note string) (model.Account, error) {
	acct, err := scanAccount(tx.QueryRow(ctx, `SELECT `+accountColumns+` FROM accounts a WHERE a.name = $1 FOR NO KEY UPDATE`, name))
	if errors.Is(err, pgx.ErrNoRows) {
		return model.Account{}, fmt.Errorf("account %q: %w", name, ErrNotFound)
	}
	if err != nil {
		return model.Account{}, err
	}
	if acct.Unlimited {
		if _, err := tx.Exec(ctx, `UPDATE accounts SET unlimited = false WHERE name = $1`, name); err != nil {
			return model.Account{}, err
		}
		if used := acct.SettledBytes + acct.HeldBytes - acct.GrantedBytes; used > 0 {
			if _, err := tx.Exec(ctx, `INSERT INTO ledger_entries (account, kind, bytes, actor, note)
				VALUES ($1, 'grant', $2, $3, 'what the account used before it had a quota')`, name, used, actor); err != nil {
				return model.Account{}, err
			}
		}
	}
	if _, err := tx.Exec(ctx, `INSERT INTO ledger_entries (account, kind, bytes, actor, note) VALUES ($1, 'grant', $2, $3, $4)`,
		name, bytes, actor, note); err != nil {
		return model.Account{}, err
	}
	crashpoint.At("grant-before-commit")
	return scanAccount(tx.QueryRow(ctx, `SELECT `+accountColumns+` FROM accounts a WHERE a.name = $1`, name))
}

// AccountList lists the accounts with their sums; name "" lists all.
func (s *Store) AccountList(ctx context.Context, name string) ([]model.Account, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+accountKeptColumns+` FROM accounts a WHERE $1 = '' OR a.name = $1 ORDER BY a.name`, name)
	if err != nil {
		return nil, fmt.Errorf("list accounts: %w", err)
	}
	accounts, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (model.Account, error) { return scanAccount(r) })
	if err != nil {
		return nil, fmt.Errorf("list accounts: %w", err)
	}
	if name != "" && len(accounts) == 0 {
		return nil, fmt.Errorf("account %q: %w", name, ErrNotFound)
	}
	return accounts, nil
}

const entryColumns = `e.id, e.account, e.kind, e.bytes, e.run_id, e.attempt_no, e.hold_id, e.created_at, e.actor, e.note`

func entryDest(e *model.LedgerEntry) []any {
	return []any{&e.ID, &e.Account, &e.Kind, &e.Bytes, &e.RunID, &e.Attempt, &e.HoldID, &e.CreatedAt, &e.Actor, &e.Note}
}

// EntryList lists an account's entries, newest first.
func (s *Store) EntryList(ctx context.Context, account string, limit int) ([]model.LedgerEntry, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+entryColumns+` FROM ledger_entries e WHERE e.account = $1
		ORDER BY e.id DESC LIMIT $2`, account, limit)
	if err != nil {
		return nil, fmt.Errorf("list ledger entries of %s: %w", account, err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (model.LedgerEntry, error) {
		var e model.LedgerEntry
		return e, r.Scan(entryDest(&e)...)
	})
}

// HoldListOpen lists an account's open holds, oldest first.
func (s *Store) HoldListOpen(ctx context.Context, account string) ([]model.OpenHold, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+entryColumns+`, r.job_name, a.ended_at IS NOT NULL, coalesce(a.settle_deferred, '')
		FROM open_holds e JOIN runs r ON r.id = e.run_id
		JOIN attempts a ON a.run_id = e.run_id AND a.attempt_no = e.attempt_no
		WHERE e.account = $1
		ORDER BY e.id`, account)
	if err != nil {
		return nil, fmt.Errorf("list open holds of %s: %w", account, err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (model.OpenHold, error) {
		var h model.OpenHold
		return h, r.Scan(append(entryDest(&h.LedgerEntry), &h.JobName, &h.AttemptEnded, &h.Deferred)...)
	})
}

// LedgerList reads the ledgers of the accounts (name "" for all), with at most limit entries each.
func (s *Store) LedgerList(ctx context.Context, name string, limit int) ([]model.AccountLedger, error) {
	accounts, err := s.AccountList(ctx, name)
	if err != nil {
		return nil, err
	}
	out := make([]model.AccountLedger, len(accounts))
	for i, a := range accounts {
		out[i].Account = a
		holds, err := s.HoldListOpen(ctx, a.Name)
		if err != nil {
			return nil, err
		}
		for _, h := range holds {
			var deferred bool
			if h.Deferred, deferred = ledger.Deferral(h.AttemptEnded, h.Deferred); deferred {
				out[i].Deferred = append(out[i].Deferred, h)
			} else {
				out[i].Held = append(out[i].Held, h)
			}
		}
		if out[i].Entries, err = s.EntryList(ctx, a.Name, limit); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// holdPlan is what an attempt about to run may hold, or why it may not run.
type holdPlan struct {
	needed  bool // false: the run adds nothing (a prune or forget) and holds nothing
	account string
	ledger.Hold
}

// planHold reads the facts of the hold of the run's next attempt, locking the account's row so
// that two holds never both take the last of a balance, lets package ledger decide it, and
// records the run's budget if it changed. source is what the job's paths hold, measured as the
// attempt starts (AttemptHoldSize); nil before.
func planHold(ctx context.Context, tx pgx.Tx, runID uuid.UUID, source *ledger.Source) (holdPlan, error) {
	var p holdPlan
	var kind model.Kind
	var jobEngine string
	var jobID int64
	f := ledger.HoldFacts{Run: runID.String(), Source: source}
	err := tx.QueryRow(ctx, `SELECT r.kind, j.engine, j.id, j.account, j.max_added, r.budget_bytes,
			cardinality(j.paths) > 0 AND j.stdin_from = ''
		FROM runs r JOIN jobs j ON j.id = r.job_id WHERE r.id = $1`, runID).Scan(&kind, &jobEngine, &jobID, &p.account, &f.MaxAdded, &f.Budget,
		&f.Sizable)
	if errors.Is(err, pgx.ErrNoRows) {
		return p, nil // the job was removed: the run ends before it spawns
	}
	if err != nil || !model.AddsToRepository(kind, jobEngine) {
		return p, err
	}
	p.needed, f.Account = true, p.account
	// NO KEY UPDATE: it serializes hold decisions yet does not wait on the key-share lock a
	// settlement's insert in the same transaction (or a concurrent one) holds on this row;
	// FOR UPDATE would, and two restarts sharing an account would deadlock.
	if err := tx.QueryRow(ctx, `SELECT unlimited, allowance_bytes, coalesce(allowance_period, '') FROM accounts
		WHERE name = $1 FOR NO KEY UPDATE`, p.account).Scan(&f.Unlimited, &f.Allowance, &f.Period); err != nil {
		return p, err
	}
	if err := tx.QueryRow(ctx, `SELECT
			coalesce((SELECT sum(bytes) FROM ledger_entries WHERE run_id = $1 AND kind = 'settle'), 0)::bigint,
			coalesce((SELECT sum(bytes) FROM open_holds WHERE run_id = $1), 0)::bigint`, runID).Scan(&f.Charged, &f.Open); err != nil {
		return p, err
	}
	if f.NeedsHistory() {
		rows, err := tx.Query(ctx, `SELECT bytes_added FROM runs WHERE job_id = $1 AND kind = 'backup'
			AND status IN ('succeeded', 'partial') AND bytes_added IS NOT NULL ORDER BY finished_at DESC LIMIT 5`, jobID)
		if err != nil {
			return p, err
		}
		if f.Recent, err = pgx.CollectRows(rows, pgx.RowTo[int64]); err != nil {
			return p, err
		}
	}
	if !f.Unlimited {
		acct, err := scanAccount(tx.QueryRow(ctx, `SELECT `+accountColumns+` FROM accounts a WHERE a.name = $1`, p.account))
		if err != nil {
			return p, err
		}
		f.Balance, f.Quota = acct.Balance(), acct.GrantedBytes
	}
	if f.Allowance != nil {
		if err := tx.QueryRow(ctx, `SELECT coalesce(sum(bytes), 0)::bigint FROM (
				SELECT bytes, created_at FROM ledger_entries WHERE account = $1 AND kind = 'settle'
				UNION ALL SELECT bytes, created_at FROM open_holds WHERE account = $1) e
			WHERE e.created_at >= date_trunc($2, now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'`, p.account, f.Period).Scan(&f.Used); err != nil {
			return p, err
		}
	}
	p.Hold = ledger.DecideHold(f)
	if p.BudgetChanged {
		if _, err := tx.Exec(ctx, `UPDATE runs SET budget_bytes = $2 WHERE id = $1`, runID, p.Budget); err != nil {
			return p, err
		}
	}
	return p, nil
}

func insertHold(ctx context.Context, tx pgx.Tx, p holdPlan, runID uuid.UUID, attempt int) error {
	if !p.needed || p.Paused != "" || p.Sized {
		return nil
	}
	_, err := tx.Exec(ctx, `INSERT INTO ledger_entries (account, kind, bytes, run_id, attempt_no, note)
		VALUES ($1, 'hold', $2, $3, $4, $5)`, p.account, p.Bytes, runID, attempt, p.Why)
	return err
}

// holdOrPause takes the hold of a new run's attempt, or, if the run may not have one, ends the
// attempt and the run paused with the reason: the run exists, visible, and resumes when the
// account allows it.
func holdOrPause(ctx context.Context, tx pgx.Tx, runID uuid.UUID, attempt int) (paused bool, err error) {
	p, err := planHold(ctx, tx, runID, nil)
	if err != nil {
		return false, err
	}
	if p.Paused == "" {
		return false, insertHold(ctx, tx, p, runID, attempt)
	}
	return true, pauseNow(ctx, tx, runID, attempt, p.Paused, p.Reason)
}

// pauseNow ends the attempt and its run paused, before anything was spawned.
func pauseNow(ctx context.Context, tx pgx.Tx, runID uuid.UUID, attempt int, code, text string) error {
	if _, err := tx.Exec(ctx, `UPDATE attempts SET ended_at = now() WHERE run_id = $1 AND attempt_no = $2 AND ended_at IS NULL`,
		runID, attempt); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, `
		WITH r AS (
			UPDATE runs SET status = 'paused', paused_reason = $2, reason = $3, finished_at = now(), waiting_reason = NULL
			WHERE id = $1 RETURNING id, job_id)
		UPDATE jobs SET last_outcome = 'paused' FROM r WHERE jobs.id = r.job_id AND jobs.last_run_id = r.id`, runID, code, text)
	return err
}

// errHoldClosed means a hold was closed by someone else between reading and closing it.
var errHoldClosed = errors.New("the hold was closed meanwhile")

// applySettlement closes (or defers) the open hold of an ended attempt, inside the transaction
// that ends it. An attempt without an open hold has nothing to settle.
func applySettlement(ctx context.Context, tx pgx.Tx, runID uuid.UUID, attempt int, st *ledger.Settlement, actor string) error {
	var holdID, held int64
	var account string
	err := tx.QueryRow(ctx, `SELECT id, bytes, account FROM open_holds WHERE run_id = $1 AND attempt_no = $2`,
		runID, attempt).Scan(&holdID, &held, &account)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	if err != nil {
		return err
	}
	if st == nil {
		st = &ledger.Settlement{Deferred: "the attempt ended without a decision on its figure"}
	}
	if st.Deferred != "" {
		_, err = tx.Exec(ctx, `UPDATE attempts SET settle_deferred = $3 WHERE run_id = $1 AND attempt_no = $2`, runID, attempt, st.Deferred)
		return err
	}
	kind, bytes := "settle", min(st.Bytes, held)
	if st.Release {
		kind, bytes = "release", held
	}
	// Another pass or an operator may have closed the hold since it was read: the unique index
	// refuses the second close, and this one then changes nothing.
	tag, err := tx.Exec(ctx, `INSERT INTO ledger_entries (account, kind, bytes, run_id, attempt_no, hold_id, actor, note)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
		ON CONFLICT (hold_id) WHERE hold_id IS NOT NULL DO NOTHING`, account, kind, bytes, runID, attempt, holdID, actor, st.Source)
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		return errHoldClosed
	}
	_, err = tx.Exec(ctx, `UPDATE attempts SET settle_deferred = NULL WHERE run_id = $1 AND attempt_no = $2`, runID, attempt)
	return err
}

// RunSettleByHandParams is the operator's settlement of a run's deferred hold.
type RunSettleByHandParams struct {
	RunID uuid.UUID
	Bytes int64  // the operator's figure
	Actor string // who settles
	Why   string // recorded with the settlement
}

// RunSettleByHand settles the run's open deferred hold at the operator's figure, recorded as such.
func (s *Store) RunSettleByHand(ctx context.Context, p RunSettleByHandParams) (model.LedgerEntry, error) {
	var out model.LedgerEntry
	err := inTx(ctx, s.pool, func(tx pgx.Tx) error {
		var attempt int
		var held int64
		err := tx.QueryRow(ctx, `SELECT h.attempt_no, h.bytes FROM open_holds h
			JOIN attempts a ON a.run_id = h.run_id AND a.attempt_no = h.attempt_no
			WHERE h.run_id = $1 AND a.ended_at IS NOT NULL
			ORDER BY h.attempt_no LIMIT 1 FOR UPDATE OF a`, p.RunID).Scan(&attempt, &held)
		if errors.Is(err, pgx.ErrNoRows) {
			return &ConflictError{Msg: fmt.Sprintf("run %s has no open hold of an ended attempt to settle", p.RunID)}
		}
		if err != nil {
			return err
		}
		if p.Bytes > held {
			return &ConflictError{Msg: fmt.Sprintf("run %s attempt %d holds %s: it cannot be charged %s, more than it held",
				p.RunID, attempt, ledger.FormatSize(held), ledger.FormatSize(p.Bytes))}
		}
		err = applySettlement(ctx, tx, p.RunID, attempt, &ledger.Settlement{Bytes: p.Bytes, Source: "settled by hand: " + p.Why}, p.Actor)
		if errors.Is(err, errHoldClosed) {
			return &ConflictError{Msg: fmt.Sprintf("run %s attempt %d was settled meanwhile", p.RunID, attempt)}
		}
		if err != nil {
			return err
		}
		crashpoint.At("settle-before-commit")
		return tx.QueryRow(ctx, `SELECT `+entryColumns+` FROM ledger_entries e WHERE e.kind = 'settle' AND e.run_id = $1 AND e.attempt_no = $2`,
			p.RunID, attempt).Scan(entryDest(&out)...)
	})
	if err != nil {
		return model.LedgerEntry{}, wrap(err, "settle run %s", p.RunID)
	}
	crashpoint.At("settle-after")
	return out, nil
}

// RunRequestPause records a pause intent on a live run (the reconciler stops its unit); it reports
// false if the run is no longer live or already has a stop or pause intent.
func (s *Store) RunRequestPause(ctx context.Context, runID uuid.UUID, reason string) (bool, error) {
	tag, err := s.pool.Exec(ctx, `UPDATE runs SET paused_reason = $2
		WHERE id = $1 AND status IN ('queued', 'running') AND paused_reason IS NULL AND stop_requested_at IS NULL`, runID, reason)
	if err != nil {
		return false, fmt.Errorf("pause run %s: %w", runID, err)
	}
	return tag.RowsAffected() == 1, nil
}

// AttemptSetRepoBaselineParams is the size of an attempt's local repository as it was spawned.
type AttemptSetRepoBaselineParams struct {
	Ref   model.AttemptRef
	Bytes int64
}

// AttemptSetRepoBaseline records the size of the attempt's local repository as it was spawned.
// Fenced by w.
func (s *Store) AttemptSetRepoBaseline(ctx context.Context, w model.Lease, p AttemptSetRepoBaselineParams) error {
	_, err := s.pool.Exec(ctx, `UPDATE attempts SET repo_bytes_before = $3 WHERE run_id = $1 AND attempt_no = $2
		AND `+fenced(4), p.Ref.Run, p.Ref.No, p.Bytes, w.Host, w.Holder, w.Generation)
	if err != nil {
		return fmt.Errorf("record repository baseline of run %s: %w", p.Ref.Run, err)
	}
	return nil
}

// AttemptHoldSizeParams names an attempt whose hold waits for its source (ledger.Hold.Sized),
// with what its job's paths hold, measured as it is about to start.
type AttemptHoldSizeParams struct {
	Attempt model.AttemptRef
	Source  ledger.Source
}

// AttemptHoldSize takes the hold of an attempt of a run that had no evidence to size one (no
// ceiling, no history) from what its job's paths hold: the run's budget is recorded from it and
// the attempt holds it, or, when its account cannot, the run ends paused with the reason. Only
// the holder of w, the lease the attempt was claimed under, sizes it.
func (s *Store) AttemptHoldSize(ctx context.Context, w model.Lease, p AttemptHoldSizeParams) (model.SizedHold, error) {
	var out model.SizedHold
	ref := p.Attempt
	err := inTx(ctx, s.pool, func(tx pgx.Tx) error {
		// The job's row before the account's (planHold), in the order admission takes them.
		err := tx.QueryRow(ctx, `SELECT true FROM attempts a JOIN runs r ON r.id = a.run_id JOIN jobs j ON j.id = r.job_id
			WHERE a.run_id = $1 AND a.attempt_no = $2 AND a.ended_at IS NULL AND r.budget_bytes IS NULL
			  AND NOT EXISTS (SELECT 1 FROM ledger_entries h WHERE h.kind = 'hold' AND h.run_id = a.run_id AND h.attempt_no = a.attempt_no)
			  AND holdfast_fence(a.host, a.lease_generation, $3, $4, $5)
			FOR UPDATE OF j, a`, ref.Run, ref.No, w.Host, w.Holder, w.Generation).Scan(&out.Taken)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		plan, err := planHold(ctx, tx, ref.Run, &p.Source)
		if err != nil {
			return err
		}
		out.Budget, out.Bytes, out.Why = plan.Budget, plan.Bytes, plan.Why
		if plan.Paused != "" {
			out.Paused = plan.Reason
			if err := notifyEnded(ctx, tx, ref.Run); err != nil {
				return err
			}
			return pauseNow(ctx, tx, ref.Run, ref.No, plan.Paused, plan.Reason)
		}
		return insertHold(ctx, tx, plan, ref.Run, ref.No)
	})
	if err != nil {
		return model.SizedHold{}, fmt.Errorf("size the hold of run %s attempt %d: %w", ref.Run, ref.No, err)
	}
	return out, nil
}

// AttemptOtherWriter returns a run whose attempt wrote to the same repository while this attempt ran
// (from its spawn claim to its end, or to now), if any: then the repository's growth is not
// this attempt's alone. Every end of a run on a local repository asks it, and its join took
// longer to plan than to run: its generic plan is made once per connection.
func (s *Store) AttemptOtherWriter(ctx context.Context, ref model.AttemptRef) (*uuid.UUID, error) {
	rows, err := s.queryGeneric(ctx, `
		SELECT o.run_id FROM attempts me
		JOIN runs mr ON mr.id = me.run_id JOIN jobs mj ON mj.id = mr.job_id
		JOIN jobs oj ON oj.repository = mj.repository
		-- The runs of those jobs still open or closed since this attempt's claim: two ranges of
		-- runs_job, never the jobs' whole history.
		CROSS JOIN LATERAL (
			SELECT id FROM runs WHERE job_id = oj.id AND finished_at IS NULL
			UNION ALL
			SELECT id FROM runs WHERE job_id = oj.id AND finished_at > me.spawn_claimed_at) orr
		JOIN attempts o ON o.run_id = orr.id
		WHERE me.run_id = $1 AND me.attempt_no = $2 AND (o.run_id, o.attempt_no) <> (me.run_id, me.attempt_no)
		  AND o.spawn_claimed_at IS NOT NULL AND me.spawn_claimed_at IS NOT NULL
		  AND o.spawn_claimed_at < coalesce(me.ended_at, now())
		  AND coalesce(o.ended_at, 'infinity') > me.spawn_claimed_at
		LIMIT 1`, ref.Run, ref.No)
	var others []uuid.UUID
	if err == nil {
		others, err = pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	}
	if err != nil {
		return nil, fmt.Errorf("find other writers of run %s's repository: %w", ref.Run, err)
	}
	if len(others) == 0 {
		return nil, nil
	}
	return &others[0], nil
}

// AttemptListDeferred lists ended attempts whose holds are still open, for the sweep of host to try
// again: those of jobs pinned to host or of any-host jobs ("" lists all).
func (s *Store) AttemptListDeferred(ctx context.Context, host string) ([]model.DeferredSettlement, error) {
	rows, err := s.queryGeneric(ctx, `SELECT a.run_id, a.attempt_no, r.job_name, h.bytes, a.settle_deferred,
			CASE WHEN a.attempt_no = (SELECT max(attempt_no) FROM attempts WHERE run_id = r.id) THEN coalesce(r.snapshot_id, '') ELSE '' END,
			coalesce(j.engine, ''), coalesce(j.repository, ''), coalesce(j.password_file, '')
		FROM open_holds h JOIN attempts a ON a.run_id = h.run_id AND a.attempt_no = h.attempt_no
		JOIN runs r ON r.id = a.run_id LEFT JOIN jobs j ON j.id = r.job_id
		WHERE a.settle_deferred IS NOT NULL AND ($1 = '' OR j.host IS NULL OR j.host = $1)`, host)
	if err != nil {
		return nil, fmt.Errorf("list deferred settlements: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (model.DeferredSettlement, error) {
		var d model.DeferredSettlement
		return d, r.Scan(&d.RunID, &d.Attempt, &d.JobName, &d.Hold, &d.Deferred,
			&d.SnapshotID, &d.Engine, &d.Repository, &d.Password)
	})
}

// AttemptSettleDeferred settles a deferred attempt's hold once a figure turned up.
func (s *Store) AttemptSettleDeferred(ctx context.Context, ref model.AttemptRef, st ledger.Settlement) error {
	err := inTx(ctx, s.pool, func(tx pgx.Tx) error {
		if err := applySettlement(ctx, tx, ref.Run, ref.No, &st, "holdfast"); !errors.Is(err, errHoldClosed) {
			return err
		}
		return nil // settled by someone else meanwhile
	})
	if err != nil {
		return fmt.Errorf("settle run %s attempt %d: %w", ref.Run, ref.No, err)
	}
	return nil
}
