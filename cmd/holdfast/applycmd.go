package main

import (
	"context"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"

	"github.com/holdfast-backup/holdfast/job"
	"github.com/holdfast-backup/holdfast/model"
	"github.com/holdfast-backup/holdfast/store"
)

// configChange is one change a plan makes, as `apply --json` prints it.
type configChange struct {
	Kind   string   `json:"kind"` // "job"
	Name   string   `json:"name"`
	Action string   `json:"action"` // "create", "update" or "delete"
	Fields []string `json:"fields"` // the settings an update changes, by flag name
}

// configPlan is what apply will do, and what it leaves alone and why.
type configPlan struct {
	Changes  []configChange `json:"changes"`
	Warnings []string       `json:"warnings"`
	applied  store.Applied
}

func newApplyCmd(g *globals) *cobra.Command {
	var dryRun, prune, asJSON bool
	cmd := &cobra.Command{
		Use:   "apply FILE|DIR...",
		Short: "Make the database's jobs match YAML files: print the plan, then carry it out in one transaction",
		Long: "Make the database's jobs match YAML files (a directory: every *.yaml in it, sorted).\n" +
			"Under jobs.NAME the keys are the long flags of `job add`, a list for a flag that repeats;\n" +
			"the same checks as `job add` apply, the files of a job probed as its user. The plan (create,\n" +
			"update with the fields, delete) is printed first; then all of it is done, or none.\n" +
			"Jobs in the database but in no file are left alone (a warning) unless --prune; a job with a\n" +
			"live run is never deleted. Errors name FILE:LINE and change nothing (exit 2).",
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			set, err := readConfig(args)
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
				if err := st.ApplyConfig(ctx, plan.applied); err != nil {
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
	cmd.Flags().BoolVar(&prune, "prune", false, "delete the jobs that no file declares (never one with a live run)")
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
	existing, err := st.Jobs(ctx)
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
		have, ok := stored[d.name]
		if !ok {
			if err := job.CheckAccess(want, g.probeAs, g.credentials()); err != nil {
				return plan, d.errorOf(err)
			}
			if err := job.Slots(&want, nil, now); err != nil {
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
			if err := job.Validate(j); err != nil {
				return d.errorOf(err)
			}
			if job.AccessChanged(before, *j) {
				if err := job.CheckAccess(*j, g.probeAs, g.credentials()); err != nil {
					return d.errorOf(err)
				}
			}
			if err := job.Slots(j, &before, now); err != nil {
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
	for _, j := range existing {
		if declared[j.Name] {
			continue
		}
		if !prune {
			plan.Warnings = append(plan.Warnings, fmt.Sprintf("job %s is in the database but in no file: left alone (apply --prune deletes it)", j.Name))
			continue
		}
		live, found, err := st.LiveRunOf(ctx, j.Name)
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

// flagInMessage finds the flag an error message of the job checks names ("--retry-max 200 ...").
var flagInMessage = regexp.MustCompile(`--([a-z][a-z0-9-]*)`)

// declaredJob is the job a declaration describes: a new job with the settings it gives, set as
// `job add` sets its flags, and checked as `job add` checks it. An error names the file and the
// line of the setting it is about.
func (g *globals) declaredJob(d declaration) (model.Job, error) {
	at := d.errorAt
	if err := job.ValidateName(d.name); err != nil {
		return model.Job{}, at("", err)
	}
	var jf jobFlags
	fs := pflag.NewFlagSet("job", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	jf.bind(fs)
	var known []string
	fs.VisitAll(func(f *pflag.Flag) { known = append(known, f.Name) })
	for _, k := range d.keys {
		f := fs.Lookup(k.name)
		if f == nil {
			return model.Job{}, at(k.name, fmt.Errorf("unknown key%s", suggest(k.name, known)))
		}
		repeats := f.Value.Type() == "stringArray"
		if !repeats && len(k.values) != 1 {
			return model.Job{}, at(k.name, fmt.Errorf("give one value, not a list"))
		}
		for _, v := range k.values {
			if err := fs.Set(k.name, v); err != nil {
				return model.Job{}, at(k.name, fmt.Errorf("%q: %v", v, strings.TrimPrefix(err.Error(), "invalid argument ")))
			}
		}
		if repeats && len(k.values) == 0 {
			f.Changed = true // an empty list: none
		}
	}
	j := job.New(d.name)
	j.Host = g.host()
	if err := jf.apply(fs, &j); err != nil {
		return model.Job{}, d.errorOf(err)
	}
	if err := job.Validate(&j); err != nil {
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
	if m := flagInMessage.FindStringSubmatch(msg); m != nil && slices.ContainsFunc(d.keys, func(k declaredKey) bool { return k.name == m[1] }) {
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
	cmd := &cobra.Command{
		Use:   "export [--job NAME]...",
		Short: "Print the jobs as YAML that apply accepts (secrets stay file paths)",
		Long: "Print the jobs (all, or those named) as a configuration file that `holdfast apply` accepts:\n" +
			"`holdfast export | holdfast apply --dry-run /dev/stdin` plans no change. Settings at their\n" +
			"defaults are left out, but a job's host always appears. Secrets stay file paths.",
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			for _, n := range names {
				if err := job.ValidateName(n); err != nil {
					return inputError{err}
				}
			}
			return g.withStore(cmd, func(ctx context.Context, st *store.Store) error {
				jobs, err := st.Jobs(ctx)
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
				doc.Content = append(doc.Content, scalar("jobs", "str"), section)
				fmt.Fprintf(cmd.OutOrStdout(), "# holdfast export, %s\n", time.Now().UTC().Format(time.RFC3339))
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
	return cmd
}

// exportJob is a job as a declaration: every setting that differs from a new job's, and the host.
func exportJob(j model.Job) *yaml.Node {
	defaults := job.New(j.Name)
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
		m.Content = append(m.Content, scalar(s.flag, "str"))
		if s.kind == "list" {
			seq := &yaml.Node{Kind: yaml.SequenceNode}
			for _, item := range v {
				seq.Content = append(seq.Content, scalar(item, "str"))
			}
			m.Content = append(m.Content, seq)
			continue
		}
		m.Content = append(m.Content, scalar(v[0], s.kind))
	}
	return m
}

// scalar is a YAML scalar of a kind ("str", "int" or "bool"): a string is quoted where YAML
// would read it as something else.
func scalar(value, kind string) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!" + kind, Value: value}
}
