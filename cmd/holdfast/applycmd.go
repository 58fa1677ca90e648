package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"

	"github.com/holdfast-backup/holdfast/jobdef"
	"github.com/holdfast-backup/holdfast/ledger"
	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/store"
)

// configChange is one change a plan makes, as `apply --json` prints it.
type configChange struct {
	Kind   string   `json:"kind"` // "job", "notify" or "account"
	Name   string   `json:"name"`
	Action string   `json:"action"` // "create", "update" or "delete"
	Fields []string `json:"fields"` // the settings an update changes, by flag name
}

// configPlan is what apply will do, and what it leaves alone and why.
type configPlan struct {
	Changes  []configChange `json:"changes"`
	Warnings []string       `json:"warnings"`
	applied  store.ConfigApplyParams
}

func newApplyCmd(g *globals) *cobra.Command {
	var dryRun, prune, asJSON bool
	cmd := &cobra.Command{
		Use:   "apply FILE|DIR|-...",
		Short: "Make the database's jobs, notification targets and accounts match YAML files: print the plan, then carry it out in one transaction",
		Long: "Make the database's jobs and notification targets match YAML files (a directory: every *.yaml in it,\n" +
			"sorted; -: standard input). A file is read only if no one but root and you could have written it:\n" +
			"a regular file (not a link) of root's or yours that its group and others cannot write, in\n" +
			"directories of root's or yours that no one else can write (unless sticky, as /tmp), at most\n" +
			"1 MiB. Under jobs.NAME the keys are the long flags of `job add`, under notify.NAME those of\n" +
			"`notify add` (events: a list or comma-separated), under accounts.NAME those of `account add`\n" +
			"(quota, allowance, period; a quota only grows, by a grant), a list for a flag that repeats;\n" +
			"the same checks as `job add` apply, the files of a job probed as its user. The plan (create,\n" +
			"update with the fields, delete) is printed first; then all of it is done, or none.\n" +
			"Objects in the database but in no file are left alone (a warning) unless --prune; a job with a\n" +
			"live run is never deleted, nor a job pinned to another host (its own files declare it). A declared\n" +
			"job without host or any-host is pinned to this host, as job add pins one. Errors name FILE:LINE\n" +
			"and change nothing (exit 2).",
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			set, err := readConfig(args, cmd.InOrStdin())
			if err != nil {
				return err
			}
			return g.withStore(cmd, func(ctx context.Context, st *store.Store) error {
				plan, err := g.planConfig(ctx, st, set, prune)
				if err != nil {
					return err
				}
				if asJSON {
					if err := writeJSON(cmd.OutOrStdout(), plan); err != nil {
						return err
					}
				} else {
					printConfigPlan(cmd.OutOrStdout(), cmd.ErrOrStderr(), plan, dryRun)
				}
				if dryRun || len(plan.Changes) == 0 {
					return nil
				}
				plan.applied.Source, plan.applied.Hash, plan.applied.Actor = strings.Join(set.files, ", "), set.hash, g.actor()
				if err := st.ConfigApply(ctx, plan.applied); err != nil {
					return err
				}
				if !asJSON {
					fmt.Fprintf(cmd.OutOrStdout(), "applied %d change(s)\n", len(plan.Changes))
				}
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "print the plan and change nothing")
	cmd.Flags().BoolVar(&prune, "prune", false, "delete the jobs and notification targets no file declares (never a job with a live run)")
	cmd.Flags().BoolVar(&asJSON, "json", false, `print the plan as JSON: {"changes": [...], "warnings": [...]}`)
	return cmd
}

func printConfigPlan(out, errOut io.Writer, p configPlan, dryRun bool) {
	if len(p.Changes) == 0 {
		fmt.Fprintln(out, "no changes: the database matches the files")
	}
	for _, c := range p.Changes {
		switch c.Action {
		case "update":
			fmt.Fprintf(out, "update %s %s: %s\n", c.Kind, c.Name, strings.Join(c.Fields, ", "))
		default:
			fmt.Fprintf(out, "%s %s %s\n", c.Action, c.Kind, c.Name)
		}
	}
	for _, w := range p.Warnings {
		fmt.Fprintf(errOut, "holdfast: warning: %s\n", w)
	}
	if dryRun && len(p.Changes) > 0 {
		fmt.Fprintln(out, "dry run: nothing changed")
	}
}

// planConfig compares what the files declare with the database and decides every change, each
// declared job checked as `job add` checks one, before anything is written.
func (g *globals) planConfig(ctx context.Context, st *store.Store, set configSet, prune bool) (configPlan, error) {
	plan := configPlan{Changes: []configChange{}, Warnings: []string{}}
	accounts, err := planAccounts(ctx, st, set, &plan)
	if err != nil {
		return plan, err
	}
	existing, err := st.JobList(ctx)
	if err != nil {
		return plan, err
	}
	stored := map[string]model.Job{}
	for _, j := range existing {
		stored[j.Name] = j
	}
	declared := map[string]bool{}
	now := time.Now()
	for _, d := range set.decls {
		if d.section != "jobs" {
			continue
		}
		declared[d.name] = true
		want, err := g.declaredJob(d)
		if err != nil {
			return plan, err
		}
		if acct := cmp.Or(want.Account, store.DefaultAccount); !accounts[acct] {
			return plan, d.errorAt("account", fmt.Errorf("no account %s: declare it under accounts, or add it (holdfast account add %s --quota SIZE)", acct, acct))
		}
		have, ok := stored[d.name]
		if !ok {
			if err := jobdef.CheckAccess(want, g.probeAs, g.credentials()); err != nil {
				return plan, d.errorOf(err)
			}
			if err := jobdef.Slots(&want, nil, now); err != nil {
				return plan, d.errorOf(err)
			}
			plan.applied.Create = append(plan.applied.Create, want)
			plan.Changes = append(plan.Changes, configChange{Kind: "job", Name: d.name, Action: "create", Fields: []string{}})
			continue
		}
		fields := changedSettings(have, want)
		if len(fields) == 0 {
			continue
		}
		// Checked now on the job as stored, and again in the transaction on the row it locks.
		edit := func(j *model.Job) error {
			before := *j
			copySettings(j, want, fields)
			if err := jobdef.Validate(j); err != nil {
				return d.errorOf(err)
			}
			if jobdef.AccessChanged(before, *j) {
				if err := jobdef.CheckAccess(*j, g.probeAs, g.credentials()); err != nil {
					return d.errorOf(err)
				}
			}
			if err := jobdef.Slots(j, &before, now); err != nil {
				return d.errorOf(err)
			}
			return nil
		}
		probe := have
		if err := edit(&probe); err != nil {
			return plan, err
		}
		plan.applied.Update = append(plan.applied.Update, store.JobEdit{Name: d.name, Fields: fields, Edit: edit})
		plan.Changes = append(plan.Changes, configChange{Kind: "job", Name: d.name, Action: "update", Fields: fields})
	}
	jobsKnown := map[string]bool{}
	for name := range stored {
		jobsKnown[name] = true
	}
	for name := range declared {
		jobsKnown[name] = true
	}
	if err := g.planTargets(ctx, st, set, prune, jobsKnown, &plan); err != nil {
		return plan, err
	}
	for _, j := range existing {
		// Another host's jobs are its own files' business: one host's apply never touches them.
		if declared[j.Name] || j.Host != "" && j.Host != g.host() {
			continue
		}
		if !prune {
			plan.Warnings = append(plan.Warnings, fmt.Sprintf("job %s is in the database but in no file: left alone (apply --prune deletes it)", j.Name))
			continue
		}
		live, found, err := st.JobLiveRun(ctx, j.Name)
		if err != nil {
			return plan, err
		}
		if found {
			return plan, badInput("job %s is in no file but has a live run %s: it is not deleted; stop the run (holdfast run stop %s) or declare the job", j.Name, live, live)
		}
		plan.applied.Delete = append(plan.applied.Delete, j.Name)
		plan.Changes = append(plan.Changes, configChange{Kind: "job", Name: j.Name, Action: "delete", Fields: []string{}})
	}
	return plan, nil
}

// declaredAccount is what an accounts.NAME declaration gives, read as `account add` reads its
// flags: a quota (nil: unlimited), and an allowance per period.
type declaredAccount struct {
	name      string
	quota     *int64
	allowance *int64
	period    string
}

func readAccount(d declaration) (declaredAccount, error) {
	a := declaredAccount{name: d.name}
	if err := jobdef.ValidateName(d.name); err != nil {
		return a, d.errorAt("", fmt.Errorf("an account name is lower-case letters, digits, '.', '_' and '-'"))
	}
	var quota, allowance string
	fs := pflag.NewFlagSet("account", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&quota, "quota", "", "")
	fs.StringVar(&allowance, "allowance", "", "")
	fs.StringVar(&a.period, "period", "", "")
	if err := setFlags(d, fs, nil); err != nil {
		return a, err
	}
	if quota != "" {
		q, err := ledger.ParseSize(quota)
		if err != nil {
			return a, d.errorAt("quota", err)
		}
		a.quota = &q
	}
	allow, err := ledger.ParseAllowance(allowance, a.period)
	if err != nil {
		return a, d.errorOf(err)
	}
	a.allowance = allow
	return a, nil
}

// planAccounts adds the accounts' changes to plan. A quota only grows: the ledger adds grants and
// never takes one back, so a file that gives less than an account was granted is refused.
func planAccounts(ctx context.Context, st *store.Store, set configSet, plan *configPlan) (known map[string]bool, err error) {
	existing, err := st.AccountList(ctx, "")
	if err != nil {
		return nil, err
	}
	known = map[string]bool{}
	stored := map[string]model.Account{}
	for _, a := range existing {
		stored[a.Name] = a
		known[a.Name] = true
	}
	declared := map[string]bool{}
	for _, d := range set.decls {
		if d.section != "accounts" {
			continue
		}
		declared[d.name], known[d.name] = true, true
		want, err := readAccount(d)
		if err != nil {
			return nil, err
		}
		have, ok := stored[d.name]
		if !ok {
			plan.applied.CreateAccounts = append(plan.applied.CreateAccounts,
				store.AccountCreateParams{Name: want.name, Quota: want.quota, Allowance: want.allowance, Period: want.period})
			plan.Changes = append(plan.Changes, configChange{Kind: "account", Name: d.name, Action: "create", Fields: []string{}})
			continue
		}
		c := store.AccountChange{Name: d.name}
		var fields []string
		switch {
		case want.quota == nil && !have.Unlimited:
			return nil, d.errorAt("quota", fmt.Errorf("account %s has a quota of %s: a file cannot take it away (the ledger only adds grants); give quota: %d or more",
				d.name, ledger.FormatSize(have.GrantedBytes), have.GrantedBytes))
		case want.quota != nil && !have.Unlimited && *want.quota < have.GrantedBytes:
			return nil, d.errorAt("quota", fmt.Errorf("%s is less than the %s account %s was granted: the ledger only adds grants; give %d or more",
				ledger.FormatSize(*want.quota), ledger.FormatSize(have.GrantedBytes), d.name, have.GrantedBytes))
		case want.quota != nil && have.Unlimited:
			// store.AccountGrant first grants what the account used without a quota; the rest makes it Q.
			c.Grant = *want.quota - have.GrantedBytes - max(have.SettledBytes+have.HeldBytes-have.GrantedBytes, 0)
			if c.Grant <= 0 {
				return nil, d.errorAt("quota", fmt.Errorf("%s is no more than account %s has used already (%s): give more",
					ledger.FormatSize(*want.quota), d.name, ledger.FormatSize(have.SettledBytes+have.HeldBytes)))
			}
			fields = append(fields, "quota")
		case want.quota != nil && *want.quota > have.GrantedBytes:
			c.Grant = *want.quota - have.GrantedBytes
			fields = append(fields, "quota")
		}
		if !equalSize(want.allowance, have.AllowanceBytes) || want.period != have.AllowancePeriod {
			c.SetAllowance, c.Allowance, c.Period = true, want.allowance, want.period
			fields = append(fields, "allowance")
		}
		if len(fields) > 0 {
			plan.applied.UpdateAccounts = append(plan.applied.UpdateAccounts, c)
			plan.Changes = append(plan.Changes, configChange{Kind: "account", Name: d.name, Action: "update", Fields: fields})
		}
	}
	for _, a := range existing {
		if !declared[a.Name] && !(a.Name == store.DefaultAccount && a.Unlimited) {
			plan.Warnings = append(plan.Warnings, fmt.Sprintf("account %s is in the database but in no file: left alone (accounts are never deleted: their ledger is history)", a.Name))
		}
	}
	return known, nil
}

func equalSize(a, b *int64) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }

// planTargets adds the notification targets' changes to plan.
// A target's job must exist or be declared (jobs).
func (g *globals) planTargets(ctx context.Context, st *store.Store, set configSet, prune bool, jobs map[string]bool, plan *configPlan) error {
	existing, err := st.TargetList(ctx, "")
	if err != nil {
		return err
	}
	stored := map[string]model.Target{}
	for _, t := range existing {
		stored[t.Name] = t
	}
	declared := map[string]bool{}
	for _, d := range set.decls {
		if d.section != "notify" {
			continue
		}
		declared[d.name] = true
		want, err := declaredTarget(d)
		if err != nil {
			return err
		}
		if want.Job != "" && !jobs[want.Job] {
			return d.errorAt("job", fmt.Errorf("no job %s: declare it under jobs, or give the name of a job", want.Job))
		}
		have, ok := stored[d.name]
		if hiddenURL(want) {
			// As export printed it: the stored URL, if it hides to the same.
			var why string
			switch {
			case !ok:
				why = fmt.Sprintf("there is no target %s to keep a URL of", d.name)
			case have.Kind != want.Kind:
				why = fmt.Sprintf("target %s is a %s target, with no %s URL to keep", d.name, have.Kind, want.Kind)
			case hideURL(have.URL) != want.URL:
				why = fmt.Sprintf("target %s's URL is %s", d.name, hideURL(have.URL))
			}
			if why != "" {
				return d.errorAt(want.Kind, fmt.Errorf("%s is a URL with its secret part hidden, as export prints it, and %s: give the whole URL, or take the file from holdfast export --show-secrets",
					want.URL, why))
			}
			want.URL = have.URL
		}
		switch {
		case !ok:
			plan.applied.CreateTargets = append(plan.applied.CreateTargets, want)
			plan.Changes = append(plan.Changes, configChange{Kind: "notify", Name: d.name, Action: "create", Fields: []string{}})
		case len(changedTargetSettings(have, want)) > 0:
			plan.applied.UpdateTargets = append(plan.applied.UpdateTargets, want)
			plan.Changes = append(plan.Changes, configChange{Kind: "notify", Name: d.name, Action: "update", Fields: changedTargetSettings(have, want)})
		}
	}
	for _, t := range existing {
		switch {
		case declared[t.Name]:
		case !prune:
			plan.Warnings = append(plan.Warnings, fmt.Sprintf("notification target %s is in the database but in no file: left alone (apply --prune deletes it)", t.Name))
		default:
			plan.applied.DeleteTargets = append(plan.applied.DeleteTargets, t.Name)
			plan.Changes = append(plan.Changes, configChange{Kind: "notify", Name: t.Name, Action: "delete", Fields: []string{}})
		}
	}
	return nil
}

// declaredTarget is the notification target a declaration describes, checked as `notify add`
// checks one. events may also be a list.
func declaredTarget(d declaration) (model.Target, error) {
	var nf notifyFlags
	fs := pflag.NewFlagSet("notify", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	nf.bind(fs)
	if err := setFlags(d, fs, map[string]bool{"events": true}); err != nil {
		return model.Target{}, err
	}
	t, err := nf.target(d.name)
	if err != nil {
		return model.Target{}, d.errorOf(err)
	}
	return t, nil
}

// setFlags sets the flags of fs as the declaration's keys give them, a list for a flag that
// repeats (or, joined with commas, for one of joined).
func setFlags(d declaration, fs *pflag.FlagSet, joined map[string]bool) error {
	var known []string
	fs.VisitAll(func(f *pflag.Flag) { known = append(known, f.Name) })
	for _, k := range d.keys {
		f := fs.Lookup(k.name)
		if f == nil {
			return d.errorAt(k.name, fmt.Errorf("unknown key%s", suggest(k.name, known)))
		}
		values := k.values
		if joined[k.name] && len(values) != 1 {
			values = []string{strings.Join(values, ",")}
		}
		repeats := f.Value.Type() == "stringArray"
		if !repeats && len(values) != 1 {
			return d.errorAt(k.name, fmt.Errorf("give one value, not a list"))
		}
		for _, v := range values {
			if err := fs.Set(k.name, v); err != nil {
				return d.errorAt(k.name, fmt.Errorf("%q: %v", v, strings.TrimPrefix(err.Error(), "invalid argument ")))
			}
		}
		if repeats && len(values) == 0 {
			f.Changed = true // an empty list: none
		}
	}
	return nil
}

// flagInMessage finds the flag an error message of the job checks names ("--retry-max 200 ...").
var flagInMessage = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`--([a-z][a-z0-9-]*)`) })

// declaredJob is the job a declaration describes: a new job with the settings it gives, set as
// `job add` sets its flags, and checked as `job add` checks it. An error names the file and the
// line of the setting it is about.
func (g *globals) declaredJob(d declaration) (model.Job, error) {
	if err := jobdef.ValidateName(d.name); err != nil {
		return model.Job{}, d.errorAt("", err)
	}
	var jf jobFlags
	fs := pflag.NewFlagSet("job", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	jf.bind(fs)
	if err := setFlags(d, fs, nil); err != nil {
		return model.Job{}, err
	}
	j := jobdef.New(d.name)
	j.Host = g.host()
	if err := jf.apply(fs, &j); err != nil {
		return model.Job{}, d.errorOf(err)
	}
	if err := jobdef.Validate(&j); err != nil {
		return model.Job{}, d.errorOf(err)
	}
	return j, nil
}

// errorAt is err as apply reports it: FILE:LINE: jobs.NAME.KEY: err, at the line of key ("":
// the declaration's own).
func (d declaration) errorAt(key string, err error) error {
	path := d.path()
	if key != "" {
		path += "." + key
	}
	return badInput("%s: %s: %v", d.where(d.lineOf(key)), path, err)
}

// errorOf is a check's err at the setting it is about: the one its message names as a flag
// ("--retry-max 200 ...") or starts with ("schedule ...", "password file ..."), else the
// declaration.
func (d declaration) errorOf(err error) error {
	msg := err.Error()
	if m := flagInMessage().FindStringSubmatch(msg); m != nil && slices.ContainsFunc(d.keys, func(k declaredKey) bool { return k.name == m[1] }) {
		return d.errorAt(m[1], err)
	}
	for _, k := range d.keys {
		if strings.HasPrefix(msg, k.name+" ") || strings.HasPrefix(msg, strings.ReplaceAll(k.name, "-", " ")+" ") {
			return d.errorAt(k.name, err)
		}
	}
	return d.errorAt("", err)
}

func newExportCmd(g *globals) *cobra.Command {
	var names []string
	var showSecrets bool
	cmd := &cobra.Command{
		Use:   "export [--job NAME]... [--show-secrets]",
		Short: "Print the jobs, notification targets and accounts as YAML that apply accepts (secrets stay file paths, secret URLs hidden)",
		Long: "Print the jobs (all, or those named; with none named, the accounts and notification targets\ntoo) as a configuration file that `holdfast apply` accepts:\n" +
			"`holdfast export | holdfast apply --dry-run -` plans no change. Settings at their\n" +
			"defaults are left out, but a job's host always appears. Secrets stay file paths. A webhook's or\n" +
			"a healthchecks check's URL is printed as its scheme and host and /… (its path may be the\n" +
			"secret), which apply reads as \"keep the URL stored under this name\"; a database without that\n" +
			"target refuses it. --show-secrets prints the URLs whole, for a file applied to another database.",
		Args: exactArgs(0, "no arguments"),
		// YAML that apply reads back: its encoder escapes control characters itself.
		Annotations: map[string]string{outputAnnotation: machineOutput},
		RunE: func(cmd *cobra.Command, _ []string) error {
			for _, n := range names {
				if err := jobdef.ValidateName(n); err != nil {
					return inputError{err}
				}
			}
			return g.withStore(cmd, func(ctx context.Context, st *store.Store) error {
				jobs, err := st.JobList(ctx)
				if err != nil {
					return err
				}
				for _, n := range names {
					if !slices.ContainsFunc(jobs, func(j model.Job) bool { return j.Name == n }) {
						return fmt.Errorf("job %q: %w", n, store.ErrNotFound)
					}
				}
				doc := &yaml.Node{Kind: yaml.MappingNode}
				section := &yaml.Node{Kind: yaml.MappingNode}
				for _, j := range jobs {
					if len(names) > 0 && !slices.Contains(names, j.Name) {
						continue
					}
					section.Content = append(section.Content, scalar(j.Name, "str"), exportJob(j))
				}
				if len(names) == 0 {
					accounts, err := st.AccountList(ctx, "")
					if err != nil {
						return err
					}
					as := &yaml.Node{Kind: yaml.MappingNode}
					for _, a := range accounts {
						if a.Name == store.DefaultAccount && a.Unlimited {
							continue // there always is one
						}
						as.Content = append(as.Content, scalar(a.Name, "str"), exportAccount(a))
					}
					if len(as.Content) > 0 {
						doc.Content = append(doc.Content, scalar("accounts", "str"), as)
					}
				}
				doc.Content = append(doc.Content, scalar("jobs", "str"), section)
				if len(names) == 0 {
					targets, err := st.TargetList(ctx, "")
					if err != nil {
						return err
					}
					if len(targets) > 0 {
						ts := &yaml.Node{Kind: yaml.MappingNode}
						for _, t := range targets {
							ts.Content = append(ts.Content, scalar(t.Name, "str"), exportTarget(t, showSecrets))
						}
						doc.Content = append(doc.Content, scalar("notify", "str"), ts)
					}
				}
				if showSecrets {
					fmt.Fprintf(cmd.OutOrStdout(), "# holdfast export --show-secrets, %s: the target URLs are whole; keep this file as secret as they are\n",
						time.Now().UTC().Format(time.RFC3339))
				} else {
					fmt.Fprintf(cmd.OutOrStdout(), "# holdfast export, %s\n", time.Now().UTC().Format(time.RFC3339))
				}
				enc := yaml.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent(2)
				if err := enc.Encode(doc); err != nil {
					return err
				}
				return enc.Close()
			})
		},
	}
	cmd.Flags().StringArrayVar(&names, "job", nil, "export only this job (repeatable)")
	cmd.Flags().BoolVar(&showSecrets, "show-secrets", false, "print webhook and healthchecks URLs whole, for a file applied to another database (keep it as secret as they are)")
	return cmd
}

// exportJob is a job as a declaration: every setting that differs from a new job's, and the host.
func exportJob(j model.Job) *yaml.Node {
	defaults := jobdef.New(j.Name)
	m := &yaml.Node{Kind: yaml.MappingNode}
	for _, s := range jobSettings {
		v := s.render(j)
		switch {
		case s.flag == "host" && j.Host == "":
			m.Content = append(m.Content, scalar("any-host", "str"), scalar("true", "bool"))
			continue
		case s.flag != "host" && slices.Equal(v, s.render(defaults)):
			continue
		case v == nil:
			continue
		}
		addSetting(m, s.flag, s.kind, v)
	}
	return m
}

// exportAccount is an account as a declaration: its quota (all its grants) and allowance.
func exportAccount(a model.Account) *yaml.Node {
	m := &yaml.Node{Kind: yaml.MappingNode}
	if !a.Unlimited {
		m.Content = append(m.Content, scalar("quota", "str"), scalar(exactSize(a.GrantedBytes), "str"))
	}
	if a.AllowanceBytes != nil {
		m.Content = append(m.Content, scalar("allowance", "str"), scalar(exactSize(*a.AllowanceBytes), "str"),
			scalar("period", "str"), scalar(a.AllowancePeriod, "str"))
	}
	return m
}

// exactSize writes n as the largest IEC unit that divides it (5GiB), else in bytes.
func exactSize(n int64) string {
	for _, u := range []struct {
		size int64
		name string
	}{{1 << 40, "TiB"}, {1 << 30, "GiB"}, {1 << 20, "MiB"}, {1 << 10, "KiB"}} {
		if n >= u.size && n%u.size == 0 {
			return strconv.FormatInt(n/u.size, 10) + u.name
		}
	}
	return strconv.FormatInt(n, 10)
}

// exportTarget is a notification target as a declaration: the settings it has, a secret URL
// hidden unless showSecrets, and saying so in a comment.
func exportTarget(t model.Target, showSecrets bool) *yaml.Node {
	m := &yaml.Node{Kind: yaml.MappingNode}
	for _, s := range targetSettings {
		v := s.render(t)
		if len(v) == 0 || len(v) == 1 && v[0] == "" {
			continue
		}
		hidden := s.secret && !showSecrets && hideURL(v[0]) != v[0]
		if hidden {
			v = []string{hideURL(v[0])}
		}
		addSetting(m, s.flag, s.kind, v)
		if hidden {
			m.Content[len(m.Content)-1].LineComment = "hidden: apply keeps the stored URL; export --show-secrets prints it whole"
		}
	}
	return m
}

// addSetting adds a setting to a declaration's mapping: a list for a flag of kind "list", else
// its one value.
func addSetting(m *yaml.Node, flag, kind string, values []string) {
	m.Content = append(m.Content, scalar(flag, "str"))
	if kind != "list" {
		m.Content = append(m.Content, scalar(values[0], kind))
		return
	}
	seq := &yaml.Node{Kind: yaml.SequenceNode}
	for _, item := range values {
		seq.Content = append(seq.Content, scalar(item, "str"))
	}
	m.Content = append(m.Content, seq)
}

// scalar is a YAML scalar of a kind ("str", "int" or "bool"): a string is quoted where YAML
// would read it as something else.
func scalar(value, kind string) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!" + kind, Value: value}
}
