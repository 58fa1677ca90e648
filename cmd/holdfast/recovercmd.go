package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/holdfast-backup/holdfast/credentials"
	"github.com/holdfast-backup/holdfast/inventory"
	"github.com/holdfast-backup/holdfast/ledger"
	"github.com/holdfast-backup/holdfast/migrations"
	"github.com/holdfast-backup/holdfast/recovery"
	"github.com/holdfast-backup/holdfast/setup"
	"github.com/holdfast-backup/holdfast/store"
	"github.com/holdfast-backup/holdfast/unitcmd"
)

// maxDump bounds the dump recover restores: holdfast's database, not a data set.
const maxDump = 64 << 30

type recoverOut struct {
	Restored string          `json:"restored_dump,omitempty"`
	Schema   int64           `json:"schema_version"`
	Applied  []configChange  `json:"applied"`
	Report   recovery.Report `json:"recovery"`
	Complete bool            `json:"complete"`
}

func newRecoverCmd(g *globals) *cobra.Command {
	var dump, restic string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "recover [FILE|DIR|-...] [--dump DUMP]",
		Short: "Rebuild holdfast's database after its loss, from the configuration and the repositories, or from a dump of it",
		Long: `Rebuild holdfast's database after its loss, with every daemon stopped (systemctl stop holdfast).

With --dump DUMP, the database, which must be empty (created, never migrated), is first given the
dump of holdfast's database (pg_dump -Fc, restored with pg_restore; or plain SQL, with psql), read
only if no one but root and you could have written it; the schema is then brought up to date.
The configuration's files (as holdfast apply reads them) are then applied; without a dump they
are what the jobs are made from. Then, for the jobs this host may run:

  - each job's repository is listed into the snapshot inventory, as the job's user, so snapshots
    newer than a dump are known;
  - each run the database holds live is ended by evidence, never run again: one whose unit is
    there, whose exit marker is left, whose time is to come, or that never started and only this
    host runs, is left to the daemon; one whose snapshot is in its job's repository succeeded;
    any other failed (stopped or paused, as asked), and says why;
  - each job's newest snapshot becomes its last success (a run with the trigger 'recovered'),
    with the figures restic 0.17 and later keep in it, unless the database knows a later one;
  - each account is re-based on what its local repositories measure (and what a recovery on
    another host measured of its own): one 'recovered' ledger entry, which says so.

Jobs made from the configuration are scheduled from now; a restored dump's schedules go on as
after any downtime (a job with --catch-up runs once for the slots missed). No daemon takes its
lease while it runs. Jobs pinned to other hosts are left to holdfast recover there. Run it again
at will: what it recorded it does not record twice. Exit status: 0 done; 1 an error, or not
complete (a repository could not be read, or a run's later attempt still runs: run it again
then); 2 bad input, a database that is not what it needs or a daemon running (nothing changed,
unless a dump was restored: the message says so).`,
		RunE: func(cmd *cobra.Command, args []string) (rerr error) {
			if dump == "" && len(args) == 0 {
				return badInput("nothing to recover from: give the configuration's files (holdfast recover FILE...), a dump of the database (--dump DUMP), or both")
			}
			// Everything given is read before the database is touched.
			var set configSet
			if len(args) > 0 {
				var err error
				if set, err = readConfig(args, cmd.InOrStdin()); err != nil {
					return err
				}
			}
			path, err := resticBinary(restic)
			if err != nil {
				return err
			}
			if err := g.requireDSN(); err != nil {
				return err
			}
			var dumpFile *dumpRestore
			if dump != "" {
				if dumpFile, err = g.prepareDump(dump); err != nil {
					return err
				}
				defer dumpFile.file.Close()
			}
			ctx := cmd.Context()
			rn, err := g.openSystemd(ctx)
			if err != nil {
				return err
			}
			defer rn.Close()
			if alive, st, err := rn.Alive(ctx, setup.DefaultService); err != nil {
				return err
			} else if alive {
				return inputError{fmt.Errorf("%s is %s on this host: stop it first (systemctl stop holdfast), on every host", setup.DefaultService, st.ActiveState)}
			}
			// Held to the end: no daemon takes its lease meanwhile (store.ErrRecovering).
			unlock, err := store.LockRecovery(ctx, g.address())
			if err != nil {
				return err
			}
			defer unlock()
			out := recoverOut{Applied: []configChange{}}
			// The hosts' leases a dump brings were held when it was taken: only a lease renewed
			// since the restore began is a daemon's.
			var restoredAt time.Time
			if dumpFile != nil {
				if restoredAt, err = dumpFile.restore(ctx, g); err != nil {
					return err
				}
				out.Restored = dump
				// From here on the dump is in: a recovery that fails is run again without it.
				defer func() {
					if rerr != nil {
						rerr = afterRestore(rerr)
					}
				}()
			}
			res, err := migrations.Apply(ctx, g.address().Session())
			if err != nil {
				return err
			}
			out.Schema = res.Current
			return g.withStore(cmd, func(ctx context.Context, st *store.Store) error {
				hosts, err := st.HostList(ctx)
				if err != nil {
					return err
				}
				for _, h := range hosts {
					if h.Alive && h.HeartbeatAt.After(restoredAt) {
						return inputError{fmt.Errorf("host %s's daemon holds its lease until %s: stop holdfast on every host (systemctl stop holdfast), then run holdfast recover again",
							h.Name, h.LeaseUntil.UTC().Format(time.RFC3339))}
					}
				}
				if len(set.files) > 0 {
					plan, err := g.planConfig(ctx, st, set, false)
					if err != nil {
						return err
					}
					if len(plan.Changes) > 0 {
						plan.applied.Source, plan.applied.Hash, plan.applied.Actor = strings.Join(set.files, ", "), set.hash, g.actor()
						if err := st.ConfigApply(ctx, plan.applied); err != nil {
							return err
						}
						out.Applied = plan.Changes
					}
				}
				self, err := g.env.executable()
				if err != nil {
					return fmt.Errorf("find holdfast's own executable: %w", err)
				}
				rep, err := recovery.Run(ctx, recovery.Config{Store: st, Units: rn, Host: g.host(), StateDir: g.stateDir, Actor: g.actor(),
					Inventory: inventory.Config{Runner: rn, StateDir: g.stateDir, Binary: unitcmd.Binary(self), ResticBinary: path}})
				out.Report, out.Complete = rep, err == nil && rep.Complete()
				if asJSON {
					if werr := writeJSON(cmd.OutOrStdout(), out); werr != nil {
						return werr
					}
				} else {
					printRecover(cmd.OutOrStdout(), out)
				}
				if err != nil {
					return err
				}
				if !out.Complete {
					return exitCodeError{1}
				}
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&dump, "dump", "", "a dump of holdfast's database to restore first (pg_dump -Fc, or plain SQL)")
	cmd.Flags().StringVar(&restic, "restic", "", "restic executable (default: restic in PATH)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print what was done as JSON")
	return cmd
}

func printRecover(w io.Writer, o recoverOut) {
	if o.Restored != "" {
		fmt.Fprintf(w, "restored %s\n", o.Restored)
	}
	fmt.Fprintf(w, "schema at version %d\n", o.Schema)
	for _, c := range o.Applied {
		fmt.Fprintf(w, "applied: %s %s %s\n", c.Action, c.Kind, c.Name)
	}
	r := o.Report
	for _, rr := range r.Runs {
		if rr.Status == "" {
			fmt.Fprintf(w, "run %.8s (%s, %s): %s\n", rr.Run, rr.Job, rr.Kind, rr.Reason)
			continue
		}
		fmt.Fprintf(w, "run %.8s (%s, %s): ended %s: %s\n", rr.Run, rr.Job, rr.Kind, rr.Status, rr.Reason)
	}
	for _, j := range r.Jobs {
		switch {
		case j.Error != "":
			fmt.Fprintf(w, "job %s: its repository could not be read: %s\n", j.Job, j.Error)
		case j.Recorded != nil:
			fmt.Fprintf(w, "job %s: %d snapshots (%d new to the inventory); last success %s, snapshot %.12s (run %.8s)\n",
				j.Job, j.Snapshots, j.Added, j.LastSuccess.UTC().Format(time.RFC3339), j.Snapshot, *j.Recorded)
		case j.Snapshot != "":
			fmt.Fprintf(w, "job %s: %d snapshots (%d new to the inventory); its newest, %.12s, is known already\n", j.Job, j.Snapshots, j.Added, j.Snapshot)
		default:
			fmt.Fprintf(w, "job %s: no snapshot in its repository (%d new to the inventory)\n", j.Job, j.Added)
		}
	}
	for _, a := range r.Accounts {
		fmt.Fprintf(w, "account %s: charged %s: %s\n", a.Account, ledger.FormatSize(a.Charged), a.Note)
	}
	if len(r.Elsewhere) > 0 {
		fmt.Fprintf(w, "left to holdfast recover on their hosts: %s\n", strings.Join(r.Elsewhere, ", "))
	}
	if !o.Complete {
		fmt.Fprintln(w, "holdfast recover: not complete: run it again once what is named above can be read, or has ended")
	}
}

// dumpTool says which tool restores the dump in f, from its first bytes: pg_restore for
// pg_dump's archive formats, psql for plain SQL.
func dumpTool(f *os.File) (string, error) {
	head := make([]byte, 5)
	n, err := f.ReadAt(head, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return "", err
	}
	switch {
	case bytes.Equal(head[:n], []byte("PGDMP")):
		return "pg_restore", nil
	case n >= 2 && (string(head[:2]) == "--" || bytes.HasPrefix(bytes.ToUpper(head[:n]), []byte("SET "))):
		return "psql", nil
	}
	return "", errors.New("not a PostgreSQL dump: give the file pg_dump -Fc wrote (or pg_dump's plain SQL)")
}

// dumpRestore is how a dump is given back, all of it made ready before the database is
// touched: the file as checked, the tool that reads it and the address as libpq takes it.
type dumpRestore struct {
	path   string
	file   *os.File
	tool   string // pg_restore or psql
	bin    string
	params [][2]string
}

// serviceName names the address in the service file the tool is given.
const serviceName = "holdfast-recover"

func (g *globals) prepareDump(path string) (*dumpRestore, error) {
	f, err := credentials.OpenTrusted(path, maxDump)
	if err != nil {
		return nil, inputError{err}
	}
	d := &dumpRestore{path: path, file: f}
	if d.tool, err = dumpTool(f); err != nil {
		f.Close()
		return nil, inputError{fmt.Errorf("%s: %w", path, err)}
	}
	if d.bin, err = exec.LookPath(d.tool); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s is needed to restore the dump: install PostgreSQL's client (apt install postgresql-client): %w", d.tool, err)
	}
	if d.params, err = g.address().LibpqParams(); err != nil {
		f.Close()
		return nil, inputError{err}
	}
	for _, p := range d.params {
		// libpq reads a service file a line at a time and drops a line's trailing white space.
		if p[0] != "password" && (strings.ContainsAny(p[1], "\r\n") || strings.TrimRight(p[1], " \t\f\v") != p[1]) {
			f.Close()
			return nil, badInput("the database address's %s has a line break or ends in white space, which pg_restore cannot be given: restore the dump by hand (pg_restore)", p[0])
		}
	}
	return d, nil
}

// restore restores the dump into the database, which must be empty: holdfast's schema never
// applied to it. The tool reads the file checked (its standard input) and finds the database
// by a service file of root's (PGSERVICEFILE, mode 0600 in a directory of its own) and the
// password in its environment: every user of the host can read its arguments. It returns the
// database's clock as the restore began.
func (d *dumpRestore) restore(ctx context.Context, g *globals) (time.Time, error) {
	st, release, err := g.openStore(ctx)
	if err != nil {
		return time.Time{}, err
	}
	applied, err := st.MigrationListApplied(ctx)
	var began time.Time
	if err == nil {
		began, err = st.Now(ctx)
	}
	release()
	if err != nil {
		return time.Time{}, err
	}
	if len(applied) > 0 {
		return time.Time{}, badInput("the database has holdfast's schema already (%d migrations applied): a dump is restored into an empty one: "+
			"drop the database and create it again (createdb -O holdfast holdfast), or recover without --dump", len(applied))
	}
	dir, err := os.MkdirTemp("", "holdfast-recover-")
	if err != nil {
		return time.Time{}, err
	}
	defer os.RemoveAll(dir)
	service := "[" + serviceName + "]\n"
	password := ""
	for _, p := range d.params {
		if p[0] == "password" {
			password = p[1]
			continue
		}
		service += p[0] + "=" + p[1] + "\n"
	}
	serviceFile := filepath.Join(dir, "pg_service.conf")
	if err := os.WriteFile(serviceFile, []byte(service), 0o600); err != nil {
		return time.Time{}, err
	}
	argv := []string{"--no-owner", "--no-privileges", "--single-transaction", "--exit-on-error", "--dbname", "service=" + serviceName}
	if d.tool == "psql" {
		// -f -: psql makes one transaction of a file only, not of its bare standard input.
		argv = []string{"-X", "-q", "-v", "ON_ERROR_STOP=1", "--single-transaction", "--dbname", "service=" + serviceName, "-f", "-"}
	}
	if _, err := d.file.Seek(0, io.SeekStart); err != nil {
		return time.Time{}, err
	}
	c := exec.CommandContext(ctx, d.bin, argv...)
	c.Stdin = d.file
	c.Env = append(slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, "PGSERVICEFILE=") || password != "" && strings.HasPrefix(kv, "PGPASSWORD=")
	}), "PGSERVICEFILE="+serviceFile)
	if password != "" {
		c.Env = append(c.Env, "PGPASSWORD="+password)
	}
	var stderr bytes.Buffer
	c.Stdout, c.Stderr = io.Discard, &stderr
	if err := c.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if len(msg) > 2000 {
			msg = "..." + msg[len(msg)-2000:]
		}
		return time.Time{}, fmt.Errorf("%s could not restore the dump (%v), and restored nothing: %s", d.tool, err, msg)
	}
	// The tool may have been given another database than the daemons' (an address it reads
	// otherwise): the dump must be in this one now.
	if st, release, err = g.openStore(ctx); err != nil {
		return time.Time{}, err
	}
	applied, err = st.MigrationListApplied(ctx)
	release()
	if err != nil {
		return time.Time{}, err
	}
	if len(applied) == 0 {
		return time.Time{}, fmt.Errorf("%s ended well, but the database holds no holdfast schema: %s is no dump of holdfast's database, or went elsewhere", d.tool, d.path)
	}
	return began, nil
}

// afterRestore says, in an error of a recovery that restored its dump, that the dump is in.
func afterRestore(err error) error {
	const again = "; the dump is restored: run holdfast recover again without --dump"
	var in inputError
	var code exitCodeError
	switch {
	case errors.As(err, &code):
		return err // the output said what to do
	case errors.As(err, &in):
		return inputError{fmt.Errorf("%w%s", in.err, again)}
	}
	return fmt.Errorf("%w%s", err, again)
}
