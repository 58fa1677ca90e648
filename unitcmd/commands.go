package unitcmd

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/holdfast-backup/holdfast/credentials"
	"github.com/holdfast-backup/holdfast/engine"
	"github.com/holdfast-backup/holdfast/fssnap"
	"github.com/holdfast-backup/holdfast/hook"
	"github.com/holdfast-backup/holdfast/journal"
	"github.com/holdfast-backup/holdfast/safepath"
	"github.com/holdfast-backup/holdfast/systemd"
	"github.com/holdfast-backup/holdfast/textsafe"
)

// credentialFlags are the flags by which a unit's command learns which credentials it was given.
type credentialFlags struct{ password, env, fromPassword bool }

func (c *credentialFlags) add(f *pflag.FlagSet) {
	f.BoolVar(&c.password, "password-credential", false, "set RESTIC_PASSWORD_FILE to the unit's password credential")
	f.BoolVar(&c.env, "env-credential", false, "add the variables of the unit's environment credential")
	f.BoolVar(&c.fromPassword, "from-password-credential", false, "set RESTIC_FROM_PASSWORD_FILE to the unit's credential of a copy's source password")
}

func (c credentialFlags) environ() ([]string, error) {
	env, err := credentials.Environ(os.Environ(), c.password, c.env)
	if err != nil || !c.fromPassword {
		return env, err
	}
	return credentials.WithFromPassword(env)
}

// credexec runs a command with the unit's credentials in its environment, in place of this
// process (restic unlock before a backup, restic's queries as the job's user).
func credexec() *cobra.Command {
	var creds credentialFlags
	cmd := &cobra.Command{
		Use:    "credexec [--password-credential] [--env-credential] -- COMMAND...",
		Short:  "Run a command with the unit's credentials in its environment (used by the daemon's units)",
		Hidden: true,
		Args:   cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, argv []string) error {
			env, err := creds.environ()
			if err != nil {
				return fmt.Errorf("credentials: %w", err)
			}
			path, err := exec.LookPath(argv[0])
			if err != nil {
				return fmt.Errorf("credexec: %w", err)
			}
			return syscall.Exec(path, argv, env)
		},
	}
	creds.add(cmd.Flags())
	return cmd
}

// afterInterruptTimeout bounds the command after an interrupted engine; the unit's stop timeout
// (2 min) is longer.
const afterInterruptTimeout = time.Minute

// restoreProgressEvery is how often a restore's target is measured for its progress.
const restoreProgressEvery = 3 * time.Second

func execCmd() *cobra.Command {
	var runID, journalPath, engineName, kind, progressDir, stdinFrom, restoreTarget, putBackBase string
	var putBackOverwrite bool
	var attempt int
	var totalBytes, totalFiles int64
	var creds credentialFlags
	var before, afterInterrupt, beforeSource, afterInterruptSource, hooksBefore, hooksAfter, restoreList, putBackPaths []string
	cmd := &cobra.Command{
		Use:    "exec --run R --attempt N --journal FILE --engine restic -- COMMAND...",
		Short:  "Run an engine inside a backup unit, writing its run journal (used by the daemon's units)",
		Hidden: true,
		Args:   cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, argv []string) error {
			run, err := uuid.Parse(runID)
			if err != nil {
				return badInput("--run %q is not a run id", runID)
			}
			parser, err := engine.ForOperation(engineName, "", kind)
			if err != nil {
				return InputError{err}
			}
			var execParser engine.Parser = parser
			var staged *stagedRestore
			if restoreTarget != "" {
				restic, ok := parser.(engine.Restic)
				if !ok || kind != engine.OpRestore {
					return badInput("--restore-target is for a restic restore, not engine %s kind %q", engineName, kind)
				}
				execParser = &engine.Restore{Restic: restic, Target: restoreTarget, List: restoreList}
			}
			if putBackBase != "" {
				r, ok := execParser.(*engine.Restore)
				if !ok || len(putBackPaths) == 0 {
					return badInput("--put-back-base is for a restic restore with --restore-target (its stage) and --put-back paths")
				}
				staged = &stagedRestore{base: putBackBase, stage: restoreTarget, paths: putBackPaths, overwrite: putBackOverwrite}
				r.PutBack = staged.putBack
			}
			var progress func() (engine.Progress, bool)
			if progressDir != "" {
				progress = engine.TreeProgress(progressDir, totalBytes, totalFiles)
			}
			env, err := creds.environ()
			if err != nil {
				// The engine cannot reach its repository without them: fail as it would.
				fmt.Fprintf(os.Stderr, "holdfast exec: credentials: %v\n", err)
				return ExitStatus(1)
			}
			if len(before) > 0 {
				if status, stopped := engine.RunBefore(cmd.Context(), before, env); stopped {
					return ExitStatus(status)
				}
			}
			if len(beforeSource) > 0 {
				if status, stopped := engine.RunBefore(cmd.Context(), beforeSource, sourceEnv(env)); stopped {
					return ExitStatus(status)
				}
			}
			emit := func(string, any) error { return nil }
			closeJournal := func() {}
			w, err := journal.Create(journalPath, run, attempt)
			if err != nil {
				// The backup matters more than its progress figures: run it without a journal.
				fmt.Fprintf(os.Stderr, "holdfast exec: no run journal, progress will not be recorded: %v\n", err)
			} else {
				defer w.Close()
				emit = func(typ string, payload any) error {
					if typ == engine.TypeSummary {
						// The engine's own figures also go to journald, where `run logs` shows them.
						if b, err := json.Marshal(payload); err == nil {
							fmt.Fprintf(os.Stderr, "holdfast: %s summary: %s\n", engineName, b)
						}
					}
					return w.Append(typ, payload)
				}
				closeJournal = func() {
					if err := w.Close(); err != nil {
						fmt.Fprintf(os.Stderr, "holdfast exec: close run journal: %v\n", err)
					}
				}
			}
			if staged != nil {
				if err := staged.prepare(); err != nil {
					msg := fmt.Sprintf("the restore to the original paths cannot begin: %v", err)
					fmt.Fprintf(os.Stderr, "holdfast exec: %s\n", msg)
					_ = emit(engine.TypeFatal, engine.Fatal{Message: msg})
					closeJournal()
					return ExitStatus(1)
				}
				defer staged.remove(os.Stderr)
			}
			if len(hooksBefore) > 0 {
				if status, fatal := runBeforeHooks(cmd.Context(), hooksBefore, runID, attempt, emit); status != 0 {
					outcome := parser.Classify(engine.Evidence{ExitStatus: status, Fatal: fatal, Operation: kind})
					runAfterHooks(hooksAfter, runID, attempt, status, outcome.Status, emit)
					closeJournal()
					return ExitStatus(status)
				}
			}
			var producer *engine.Producer
			if stdinFrom != "" {
				pargv, err := hook.Split(stdinFrom)
				if err != nil {
					return badInput("--stdin-from: %v", err)
				}
				// As a hook's environment (engine.HookEnv): the run's variables, never the engine's secrets.
				producer = &engine.Producer{Argv: pargv, Vars: runVars(runID, attempt, "stdin"), Line: textsafe.String(stdinFrom)}
			}
			// The context ends at the unit's stop signal, however early it came (main catches it
			// from the start): Exec passes it on to the engine, or starts none if it came first.
			// One the runtime hands on only as the engine starts reaches the engine, at once.
			if r, ok := execParser.(*engine.Restore); ok {
				r.Since = time.Now() // what is older under the target was there before (--overwrite)
			}
			status, err := engine.Exec(cmd.Context(), engine.ExecConfig{
				Argv: argv, Env: env, Parser: execParser, Emit: emit, Stderr: os.Stderr, Stdout: os.Stdout,
				Progress: progress, ProgressEvery: restoreProgressEvery, Producer: producer,
			})
			if err != nil {
				fmt.Fprintf(os.Stderr, "holdfast exec: %v\n", err)
				return ExitStatus(127)
			}
			if status == 128+int(syscall.SIGINT) || status == 128+int(syscall.SIGTERM) {
				if len(afterInterrupt) > 0 {
					engine.RunAfterInterrupt(afterInterrupt, env, afterInterruptTimeout)
				}
				if len(afterInterruptSource) > 0 {
					engine.RunAfterInterrupt(afterInterruptSource, sourceEnv(env), afterInterruptTimeout)
				}
			}
			// What the daemon will make of the exit, as far as the status says: the engine's own reading.
			outcome := parser.Classify(engine.Evidence{ExitStatus: status, Operation: kind})
			runAfterHooks(hooksAfter, runID, attempt, status, outcome.Status, emit)
			closeJournal()
			return ExitStatus(status)
		},
	}
	f := cmd.Flags()
	f.StringVar(&runID, "run", "", "run id")
	f.IntVar(&attempt, "attempt", 0, "attempt number")
	f.StringVar(&journalPath, "journal", "", "run journal file")
	f.StringVar(&engineName, "engine", engine.NameRestic, "engine: restic or command")
	f.StringVar(&kind, "kind", "", "the run's kind (backup, restore, verify, ...): how the engine's output reads")
	f.StringVar(&progressDir, "progress-dir", "", "measure progress as what is under this directory (a restore's target)")
	f.Int64Var(&totalBytes, "progress-total-bytes", 0, "the bytes --progress-dir will hold at the end (0: unknown)")
	f.Int64Var(&totalFiles, "progress-total-files", 0, "the files --progress-dir will hold at the end (0: unknown)")
	f.StringVar(&restoreTarget, "restore-target", "", "a restore's target: what the sandbox kept restic from restoring there (setuid/setgid bits, device nodes) is an item error each, and a restore that lost only that exits 3")
	f.StringVar(&putBackBase, "put-back-base", "", "a restore to the original paths: the directory its stage (--restore-target) is in, from which the --put-back paths are reached")
	f.StringArrayVar(&putBackPaths, "put-back", nil, "a path the restore puts back where it was, from its stage (repeatable)")
	f.BoolVar(&putBackOverwrite, "put-back-overwrite", false, "replace what has changed at a --put-back path since the snapshot (else it is kept)")
	f.StringArrayVar(&restoreList, "restore-list", nil, "the command that lists the restored snapshot (restic ls --json ID), one argument per flag: compared with --restore-target for the setuid/setgid bits restic does not report lost")
	f.StringArrayVar(&before, "before", nil, "a command to run first, one argument per flag; its failure is ignored")
	f.StringArrayVar(&hooksAfter, "hook-after", nil, "a job's after hook, as --hook-before, run whatever the outcome (repeatable, in order)")
	f.StringArrayVar(&hooksBefore, "hook-before", nil, "a job's before hook, a command line split as a shell splits words (repeatable, in order)")
	f.StringVar(&stdinFrom, "stdin-from", "", "a command line (split as --hook-before) whose standard output is the engine's standard input, closed only if it exits 0")
	f.StringArrayVar(&beforeSource, "before-source", nil, "as --before, with a copy's source password as restic's (RESTIC_FROM_PASSWORD_FILE as RESTIC_PASSWORD_FILE)")
	f.StringArrayVar(&afterInterruptSource, "after-interrupt-source", nil, "as --after-interrupt, with a copy's source password as restic's")
	f.StringArrayVar(&afterInterrupt, "after-interrupt", nil, "a command to run when a signal interrupted the engine (restic unlock), one argument per flag")
	creds.add(f)
	for _, name := range []string{"run", "attempt", "journal"} {
		_ = cmd.MarkFlagRequired(name)
	}
	return cmd
}

// sourceEnv is env for restic on a copy's source repository: its password (the credential in
// RESTIC_FROM_PASSWORD_FILE, if the unit has one) as RESTIC_PASSWORD_FILE.
func sourceEnv(env []string) []string {
	from := ""
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "RESTIC_FROM_PASSWORD_FILE="); ok {
			from = v
		}
	}
	if from == "" {
		return env
	}
	return append(slices.Clone(env), "RESTIC_PASSWORD_FILE="+from) // the last one counts
}

// runBeforeHooks runs a job's before hooks in order, as this process (the job's user, in its
// unit), their output on stderr, with the run's id and attempt in their environment and none of
// the engine's secrets (hookEnv). The first that fails ends the attempt: its failure is journaled as
// the fatal error ("before hook … exited N", which the engines classify) with the exit, and the
// engine is never started; one that exits engine.HookSkip ends it so, to be skipped. A stop meanwhile reaches the hook as SIGINT and ends the attempt as
// interrupted (130). It returns the status to exit with, 0 if every hook succeeded, and the fatal
// error it journaled.
func runBeforeHooks(ctx context.Context, hooks []string, runID string, attempt int, emit func(string, any) error) (int, string) {
	env := hookEnv(runID, attempt, "before")
	end := func(status int, why string) (int, string) {
		if why != "" {
			fmt.Fprintf(os.Stderr, "holdfast: %s\n", why)
			_ = emit(engine.TypeFatal, engine.Fatal{Message: why})
		}
		_ = emit(engine.TypeExit, engine.Exit{ExitStatus: status})
		return status, why
	}
	for _, h := range hooks {
		argv, err := hook.Split(h)
		if err != nil {
			return end(1, engine.HookFailed+textsafe.String(h)+": "+err.Error())
		}
		if ctx.Err() != nil {
			return end(130, "")
		}
		c := exec.Command(argv[0], argv[1:]...)
		c.Env, c.Dir, c.Stdout, c.Stderr = env, "/", os.Stderr, os.Stderr
		if err := c.Start(); err != nil {
			return end(1, engine.HookFailed+textsafe.String(h)+" could not start: "+safepath.Cause(err))
		}
		waited := make(chan error, 1)
		go func() { waited <- c.Wait() }()
		var werr error
		select {
		case werr = <-waited:
		case <-ctx.Done():
			_ = c.Process.Signal(os.Interrupt)
			<-waited
			return end(130, "")
		}
		if werr != nil && c.ProcessState.ExitCode() == engine.HookSkip {
			return end(engine.HookSkip, engine.HookFailed+textsafe.String(h)+fmt.Sprintf(" exited %d: it asked that this backup be skipped", engine.HookSkip))
		}
		if werr != nil {
			return end(1, engine.HookFailed+textsafe.String(h)+" "+engine.DescribeExit(c.ProcessState, werr))
		}
	}
	return 0, ""
}

// runVars are the variables by which a hook or a stream's producer learns its run: the run's
// id, the attempt and which kind of hook it is (before, after or stdin), then extra.
func runVars(runID string, attempt int, kind string, extra ...string) []string {
	return append([]string{"HOLDFAST_RUN=" + runID, "HOLDFAST_ATTEMPT=" + strconv.Itoa(attempt), "HOLDFAST_HOOK=" + kind}, extra...)
}

// hookEnv is a hook's whole environment: the process basics of this process's
// (engine.HookEnv), never the engine's secrets or the unit's credentials, and the run's.
func hookEnv(runID string, attempt int, kind string, extra ...string) []string {
	return engine.HookEnv(os.Environ(), runVars(runID, attempt, kind, extra...)...)
}

// runAfterHooks runs a job's after hooks in order, whatever the attempt's outcome (the engine's
// classification of status: succeeded, partial, failed, interrupted or skipped), which they get
// in HOLDFAST_OUTCOME and HOLDFAST_EXIT_STATUS beside the run; they cannot change it. The first
// failure is journaled (a hook_error event: the run's reason names it). Signals are not passed
// on: the unit is stopping, and the hooks are what it does last; its stop timeout bounds them.
func runAfterHooks(hooks []string, runID string, attempt, status int, outcome string, emit func(string, any) error) {
	env := hookEnv(runID, attempt, "after", "HOLDFAST_OUTCOME="+outcome, "HOLDFAST_EXIT_STATUS="+strconv.Itoa(status))
	failed := false
	for _, h := range hooks {
		why := ""
		if argv, err := hook.Split(h); err != nil {
			why = err.Error()
		} else {
			c := exec.Command(argv[0], argv[1:]...)
			c.Env, c.Dir, c.Stdout, c.Stderr = env, "/", os.Stderr, os.Stderr
			if err := c.Run(); err != nil {
				why = "after hook " + textsafe.String(h) + " " + engine.DescribeExit(c.ProcessState, err)
			}
		}
		if why != "" {
			fmt.Fprintf(os.Stderr, "holdfast: %s\n", why)
			if !failed {
				_ = emit(engine.TypeHookError, engine.HookError{Message: why})
				failed = true
			}
		}
	}
}

func marker(stateDir *string) *cobra.Command {
	var runID, unit string
	var attempt int
	cmd := &cobra.Command{
		Use:    "marker --run R --attempt N --unit U",
		Short:  "Write an attempt's exit marker from systemd's $SERVICE_RESULT, $EXIT_CODE, $EXIT_STATUS (ExecStopPost)",
		Hidden: true,
		Args:   noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			run, err := uuid.Parse(runID)
			if err != nil {
				return badInput("--run %q is not a run id", runID)
			}
			if !filepath.IsAbs(*stateDir) {
				return badInput("--state-dir %q is a relative path: give an absolute path such as /var/lib/holdfast", *stateDir)
			}
			if attempt < 1 {
				return badInput("--attempt must be at least 1")
			}
			m, err := systemd.MarkerFromEnv(run, attempt, unit, os.Getenv, time.Now())
			if err != nil {
				return InputError{err}
			}
			if err := systemd.WriteMarker(*stateDir, m); err != nil {
				return err
			}
			// systemd copied the staged credentials when the unit started; the unit has ended.
			if err := credentials.RemoveStaged(*stateDir, credentials.AttemptKey(run, attempt)); err != nil {
				fmt.Fprintf(cmd.ErrOrStderr(), "holdfast: staged credentials left: %v\n", err)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&runID, "run", "", "run id")
	cmd.Flags().IntVar(&attempt, "attempt", 0, "attempt number")
	cmd.Flags().StringVar(&unit, "unit", "", "unit name")
	return cmd
}

// fsSnapshotTake takes a backup's Btrfs snapshots (fssnap.Take) in a unit of its own, as root
// outside the daemon's sandbox, and prints its fssnap.Answer.
func fsSnapshotTake() *cobra.Command {
	var records, key string
	var paths, writes []string
	cmd := &cobra.Command{
		Use:    "fs-snapshot-take --records DIR --key KEY --path PATH... [--write PATH]...",
		Short:  "Take an attempt's Btrfs snapshots and print their bind mounts as JSON (run by the daemon)",
		Hidden: true,
		Args:   noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return json.NewEncoder(cmd.OutOrStdout()).Encode(fssnap.AnswerOf(fssnap.Take(records, key, paths, writes)))
		},
	}
	cmd.Flags().StringVar(&records, "records", "", "the directory of the snapshots' records")
	cmd.Flags().StringVar(&key, "key", "", "the attempt's key, RUN.aN")
	cmd.Flags().StringArrayVar(&paths, "path", nil, "a path of the job (repeatable)")
	cmd.Flags().StringArrayVar(&writes, "write", nil, "a path the unit writes, which no path may hold (repeatable)")
	return cmd
}

// fsSnapshotRelease releases an attempt's Btrfs snapshots (fssnap.Release) in a unit of its own
// and prints its fssnap.Answer.
func fsSnapshotRelease() *cobra.Command {
	var records, key string
	cmd := &cobra.Command{
		Use:    "fs-snapshot-release --records DIR --key KEY",
		Short:  "Remove an attempt's Btrfs snapshots and their record (run by the daemon)",
		Hidden: true,
		Args:   noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return json.NewEncoder(cmd.OutOrStdout()).Encode(fssnap.AnswerOf(fssnap.Taken{}, fssnap.Release(records, key)))
		},
	}
	cmd.Flags().StringVar(&records, "records", "", "the directory of the snapshots' records")
	cmd.Flags().StringVar(&key, "key", "", "the attempt's key, RUN.aN")
	return cmd
}

func drill() *cobra.Command {
	var tag, scratch string
	var files int
	cmd := &cobra.Command{
		Use:    "drill --tag TAG --files N --scratch DIR -- RESTIC [GLOBAL OPTIONS]...",
		Short:  "Restore a random sample of the latest snapshot's files and verify them (run inside a verify unit)",
		Hidden: true,
		Args:   cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, resticArgv []string) error {
			status := engine.RunDrill(cmd.Context(), engine.DrillConfig{Restic: resticArgv, Tag: tag, Files: files,
				Scratch: scratch, Rand: rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64())), Stdout: os.Stdout, Stderr: os.Stderr})
			if status != 0 {
				return ExitStatus(status)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&tag, "tag", "", "sample the latest snapshot with this tag")
	f.IntVar(&files, "files", 0, "how many files to restore")
	f.StringVar(&scratch, "scratch", "", "the directory to restore into (made, and removed after)")
	for _, name := range []string{"tag", "files", "scratch"} {
		_ = cmd.MarkFlagRequired(name)
	}
	return cmd
}
