package main

import (
	"context"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/cobra"

	"github.com/holdfast-backup/holdfast/jobdef"
	"github.com/holdfast-backup/holdfast/ledger"
	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/store"
)

func newAccountCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "account", Short: "Ledger accounts: what the jobs charged to them may add to repositories"}
	show := newLedgerShowCmd(g)
	show.Use, show.Short = "show NAME", "Show an account: quota, balance, open holds, deferred settlements, entries"
	show.Args = exactArgs(1, "one account name")
	cmd.AddCommand(newAccountAddCmd(g), newAccountGrantCmd(g), newAccountListCmd(g), show)
	return cmd
}

type accountOut struct {
	Account         string  `json:"account"`
	Unlimited       bool    `json:"unlimited"`
	QuotaBytes      *int64  `json:"quota_bytes"`   // all grants; null without a quota
	BalanceBytes    *int64  `json:"balance_bytes"` // quota − settled − held; null without a quota
	SettledBytes    int64   `json:"settled_bytes"`
	HeldBytes       int64   `json:"held_bytes"`
	AllowanceBytes  *int64  `json:"allowance_bytes,omitempty"`
	AllowancePeriod string  `json:"allowance_period,omitempty"`
	CreatedAt       string  `json:"created_at"`
	OpenHolds       []hold  `json:"open_holds"`
	Deferred        []hold  `json:"deferred"`
	Entries         []entry `json:"entries"`
}

type hold struct {
	EntryID  int64  `json:"entry_id"`
	RunID    string `json:"run_id"`
	Job      string `json:"job"`
	Attempt  int    `json:"attempt"`
	Bytes    int64  `json:"bytes"`
	HeldAt   string `json:"held_at"`
	Deferred string `json:"deferred,omitempty"`
}

type entry struct {
	ID        int64   `json:"id"`
	Kind      string  `json:"kind"`
	Bytes     int64   `json:"bytes"`
	RunID     *string `json:"run_id,omitempty"`
	Attempt   *int    `json:"attempt,omitempty"`
	HoldID    *int64  `json:"hold_id,omitempty"`
	CreatedAt string  `json:"created_at"`
	Actor     string  `json:"actor"`
	Note      string  `json:"note"`
}

func entryJSON(e model.LedgerEntry) entry {
	o := entry{ID: e.ID, Kind: e.Kind, Bytes: e.Bytes, Attempt: e.Attempt, HoldID: e.HoldID,
		CreatedAt: e.CreatedAt.UTC().Format(time.RFC3339Nano), Actor: e.Actor, Note: e.Note}
	if e.RunID != nil {
		id := e.RunID.String()
		o.RunID = &id
	}
	return o
}

func accountJSON(a model.Account) accountOut {
	o := accountOut{Account: a.Name, Unlimited: a.Unlimited, SettledBytes: a.SettledBytes, HeldBytes: a.HeldBytes,
		AllowanceBytes: a.AllowanceBytes, AllowancePeriod: a.AllowancePeriod, CreatedAt: a.CreatedAt.UTC().Format(time.RFC3339Nano),
		OpenHolds: []hold{}, Deferred: []hold{}, Entries: []entry{}}
	if !a.Unlimited {
		quota, balance := a.GrantedBytes, a.Balance()
		o.QuotaBytes, o.BalanceBytes = &quota, &balance
	}
	return o
}

func quotaText(a model.Account) string {
	if a.Unlimited {
		return fmt.Sprintf("no quota; %s charged, %s held", ledger.FormatSize(a.SettledBytes), ledger.FormatSize(a.HeldBytes))
	}
	return fmt.Sprintf("%s left of %s (%s charged, %s held)", ledger.FormatSize(a.Balance()), ledger.FormatSize(a.GrantedBytes),
		ledger.FormatSize(a.SettledBytes), ledger.FormatSize(a.HeldBytes))
}

func accountArg(name string) error {
	if err := jobdef.ValidateName(name); err != nil {
		return badInput("account name %q: use lower-case letters, digits, '.', '_' and '-' (up to 63)", name)
	}
	return nil
}

func newAccountAddCmd(g *globals) *cobra.Command {
	var quota, allowance, period string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "add NAME --quota SIZE",
		Short: "Add an account with a quota of bytes its jobs may add (e.g. --quota 500GiB)",
		Args:  exactArgs(1, "one account name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := accountArg(args[0]); err != nil {
				return err
			}
			if quota == "" {
				return badInput("--quota is required, e.g. --quota 500GiB")
			}
			q, err := ledger.ParseSize(quota)
			if err != nil {
				return badInput("--quota: %v", err)
			}
			allow, err := ledger.ParseAllowance(allowance, period)
			if err != nil {
				return inputError{err}
			}
			return g.withStore(cmd, func(ctx context.Context, st *store.Store) error {
				a, err := st.AccountCreate(ctx, store.AccountCreateParams{Name: args[0], Quota: &q, Allowance: allow, Period: period, Actor: g.actor()})
				if err != nil {
					return err
				}
				if asJSON {
					return writeJSON(cmd.OutOrStdout(), accountJSON(a))
				}
				fmt.Fprintf(cmd.OutOrStdout(), "account %s added: %s\n", a.Name, quotaText(a))
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&quota, "quota", "", "bytes the account's jobs may add, e.g. 500GiB")
	cmd.Flags().StringVar(&allowance, "allowance", "", "also at most this much per --period")
	cmd.Flags().StringVar(&period, "period", "", "the allowance's period: day, week or month (UTC)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the account as JSON")
	return cmd
}

func newAccountGrantCmd(g *globals) *cobra.Command {
	var why string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "grant NAME SIZE",
		Short: "Add SIZE to an account's quota (paused runs can then be resumed)",
		Args:  exactArgs(2, "an account name and a size"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := accountArg(args[0]); err != nil {
				return err
			}
			n, err := ledger.ParseSize(args[1])
			if err != nil {
				return inputError{err}
			}
			return g.withStore(cmd, func(ctx context.Context, st *store.Store) error {
				a, err := st.AccountGrant(ctx, store.AccountGrantParams{Name: args[0], Bytes: n, Actor: g.actor(), Note: why})
				if err != nil {
					return err
				}
				if asJSON {
					return writeJSON(cmd.OutOrStdout(), accountJSON(a))
				}
				fmt.Fprintf(cmd.OutOrStdout(), "granted %s to %s: %s\n", ledger.FormatSize(n), a.Name, quotaText(a))
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&why, "why", "", "the reason, kept with the grant")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the account as JSON")
	return cmd
}

func newAccountListCmd(g *globals) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List accounts with their quota and balance",
		Args:  exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.withStore(cmd, func(ctx context.Context, st *store.Store) error {
				accounts, err := st.AccountList(ctx, "")
				if err != nil {
					return err
				}
				if asJSON {
					out := make([]accountOut, 0, len(accounts))
					for _, a := range accounts {
						out = append(out, accountJSON(a))
					}
					return writeJSON(cmd.OutOrStdout(), out)
				}
				tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "ACCOUNT\tQUOTA AND BALANCE")
				for _, a := range accounts {
					fmt.Fprintf(tw, "%s\t%s\n", a.Name, quotaText(a))
				}
				return tw.Flush()
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func newLedgerCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "ledger", Short: "The storage ledger: holds, settlements, deferrals"}
	cmd.AddCommand(newLedgerShowCmd(g), newLedgerSettleCmd(g))
	return cmd
}

func newLedgerShowCmd(g *globals) *cobra.Command {
	var asJSON bool
	var limit int
	cmd := &cobra.Command{
		Use:   "show [ACCOUNT]",
		Short: "Show accounts' balances, open holds, deferred settlements and entries (all accounts without ACCOUNT)",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := ""
			if len(args) == 1 {
				if err := accountArg(args[0]); err != nil {
					return err
				}
				name = args[0]
			}
			if limit < 1 {
				return badInput("--limit %d: give at least 1", limit)
			}
			return g.withStore(cmd, func(ctx context.Context, st *store.Store) error {
				ledgers, err := st.LedgerList(ctx, name, limit)
				if err != nil {
					return err
				}
				holdJSON := func(h model.OpenHold) hold {
					return hold{EntryID: h.ID, RunID: h.RunID.String(), Job: h.JobName, Attempt: *h.Attempt, Bytes: h.Bytes,
						HeldAt: h.CreatedAt.UTC().Format(time.RFC3339Nano), Deferred: h.Deferred}
				}
				out := make([]accountOut, 0, len(ledgers))
				for _, l := range ledgers {
					o := accountJSON(l.Account)
					for _, h := range l.Held {
						o.OpenHolds = append(o.OpenHolds, holdJSON(h))
					}
					for _, h := range l.Deferred {
						o.Deferred = append(o.Deferred, holdJSON(h))
					}
					for _, e := range l.Entries {
						o.Entries = append(o.Entries, entryJSON(e))
					}
					out = append(out, o)
				}
				if asJSON {
					if name != "" {
						return writeJSON(cmd.OutOrStdout(), out[0])
					}
					return writeJSON(cmd.OutOrStdout(), out)
				}
				w := cmd.OutOrStdout()
				for i, o := range out {
					if i > 0 {
						fmt.Fprintln(w)
					}
					fmt.Fprintf(w, "account %s: %s\n", o.Account, quotaText(ledgers[i].Account))
					for _, h := range o.OpenHolds {
						fmt.Fprintf(w, "  held      %-10s run %.8s attempt %d (%s)\n", ledger.FormatSize(h.Bytes), h.RunID, h.Attempt, h.Job)
					}
					for _, h := range o.Deferred {
						fmt.Fprintf(w, "  deferred  %-10s run %.8s attempt %d (%s): %s\n", ledger.FormatSize(h.Bytes), h.RunID, h.Attempt, h.Job, h.Deferred)
					}
					tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
					fmt.Fprintln(tw, "  ENTRY\tWHEN\tKIND\tBYTES\tRUN\tNOTE")
					for _, e := range o.Entries {
						run := "-"
						if e.RunID != nil {
							run = fmt.Sprintf("%.8s/a%d", *e.RunID, *e.Attempt)
						}
						fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%s\t%s\n", e.ID, e.CreatedAt[:19], e.Kind, ledger.FormatSize(e.Bytes), run, e.Note)
					}
					tw.Flush()
				}
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.Flags().IntVar(&limit, "limit", 100, "show at most this many entries per account")
	return cmd
}

func newLedgerSettleCmd(g *globals) *cobra.Command {
	var bytes, why string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "settle RUN --bytes N --why TEXT",
		Short: "Settle a run's deferred hold by hand, at a figure you found (recorded as such)",
		Args:  exactArgs(1, "one run id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if bytes == "" || why == "" {
				return badInput("--bytes and --why are required: the figure and where it comes from")
			}
			n, err := ledger.ParseSize(bytes)
			if bytes == "0" {
				n, err = 0, nil
			}
			if err != nil {
				return badInput("--bytes: %v", err)
			}
			return g.withRun(cmd, args[0], func(ctx context.Context, st *store.Store, id uuid.UUID) error {
				e, err := st.RunSettleByHand(ctx, store.RunSettleByHandParams{RunID: id, Bytes: n, Actor: g.actor(), Why: why})
				if err != nil {
					return err
				}
				if asJSON {
					return writeJSON(cmd.OutOrStdout(), entryJSON(e))
				}
				fmt.Fprintf(cmd.OutOrStdout(), "run %s attempt %d settled at %s by hand\n", id, *e.Attempt, ledger.FormatSize(e.Bytes))
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&bytes, "bytes", "", "what the attempt added, e.g. 120MiB (0 if nothing)")
	cmd.Flags().StringVar(&why, "why", "", "where the figure comes from")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the settle entry as JSON")
	return cmd
}
