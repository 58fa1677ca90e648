package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"

	"github.com/holdfast-backup/holdfast/importer"
	"github.com/holdfast-backup/holdfast/store"
	"github.com/holdfast-backup/holdfast/textsafe"
)

// importers are the tools whose configurations `holdfast import` reads.
var importers = map[string]func(file string, data []byte, secretDir string) (importer.Result, error){
	"resticprofile": func(file string, data []byte, _ string) (importer.Result, error) {
		return importer.Resticprofile(file, data)
	},
	"autorestic": importer.Autorestic,
	"backrest":   importer.Backrest,
}

func newImportCmd(g *globals) *cobra.Command {
	var plan bool
	var secretDir string
	cmd := &cobra.Command{
		Use:   "import resticprofile|autorestic|backrest FILE",
		Short: "Print another tool's configuration as holdfast's YAML for apply, with every key it has no equivalent for and why",
		Long: "Read a resticprofile configuration (version 1 or 2; TOML for .toml and .conf, JSON for .json,\n" +
			"YAML otherwise) and print its profiles as jobs in the YAML that `holdfast apply` takes: each\n" +
			"profile with a backup source is a job (what it inherits resolved), its repository, password\n" +
			"file, paths, excludes, schedule (systemd calendar expressions as cron), hooks, retention, check\n" +
			"and prune schedules, nice and ionice mapped. Every key with no holdfast equivalent is listed, on\n" +
			"standard error and as a comment at the top of the YAML, with why; an inline password or\n" +
			"environment is named, never copied: secrets stay files. Nothing is written to the database;\n" +
			"--plan prints what apply would do with the YAML. The jobs have no host: apply pins them to the\n" +
			"host that applies them, where the profiles' paths are.\n\n" +
			"Or read an autorestic configuration (.autorestic.yml, version 2): each location is a job for each\n" +
			"backend it backs up to (location, or location-backend), the backend its repository; its paths,\n" +
			"cron, excludes, before and after hooks and forget options mapped. autorestic keeps a backend's key\n" +
			"and environment inline: the job's password-file and env-file are files in --secret-dir, named for\n" +
			"the backend, which you write (a note says which); their values are never copied.\n\n" +
			"Or read a Backrest config.json: each plan is a job, its repo's URI the repository, its paths,\n" +
			"excludes, schedule (cron, or a most-frequent interval as @every), retention and command hooks\n" +
			"mapped, its repo's prune and check policies the job's prune and verify schedules; the repo's\n" +
			"password and environment are files in --secret-dir named for the repo, as for autorestic.",
		Args: exactArgs(2, "the tool (resticprofile, autorestic or backrest) and its configuration file"),
		RunE: func(cmd *cobra.Command, args []string) error {
			read, ok := importers[args[0]]
			if !ok {
				return badInput("import %q: holdfast imports resticprofile's, autorestic's and Backrest's configurations", args[0])
			}
			data, err := readConfigFile(args[1])
			if err != nil {
				return err
			}
			res, err := read(args[1], data, secretDir)
			if err != nil {
				return inputError{err}
			}
			var out bytes.Buffer
			fmt.Fprintf(&out, "# holdfast import %s %s: %d job(s)\n", args[0], args[1], len(res.Jobs))
			for _, n := range res.Notes {
				line := textsafe.String(n.String())
				fmt.Fprintf(&out, "# not imported: %s\n", line)
				fmt.Fprintf(cmd.ErrOrStderr(), "holdfast: not imported: %s\n", line)
			}
			doc := &yaml.Node{Kind: yaml.MappingNode}
			section := &yaml.Node{Kind: yaml.MappingNode}
			for _, j := range res.Jobs {
				m := exportJob(j)
				// Without host or any-host, apply pins the job to the host that applies it,
				// where the profile's paths are.
				for i := 0; i+1 < len(m.Content); i += 2 {
					if m.Content[i].Value == "any-host" {
						m.Content = append(m.Content[:i], m.Content[i+2:]...)
						break
					}
				}
				section.Content = append(section.Content, scalar(j.Name, "str"), m)
			}
			doc.Content = append(doc.Content, scalar("jobs", "str"), section)
			enc := yaml.NewEncoder(&out)
			enc.SetIndent(2)
			if err := enc.Encode(doc); err != nil {
				return err
			}
			if err := enc.Close(); err != nil {
				return err
			}
			if !plan {
				_, err := io.Copy(cmd.OutOrStdout(), &out)
				return err
			}
			name := "holdfast import " + args[1]
			decls, err := parseConfig(name, out.Bytes())
			if err != nil {
				return err
			}
			sum := sha256.Sum256(out.Bytes())
			set := configSet{files: []string{name}, hash: hex.EncodeToString(sum[:])[:16], decls: decls}
			return g.withStore(cmd, func(ctx context.Context, st *store.Store) error {
				p, err := g.planConfig(ctx, st, set, false)
				if err != nil {
					return err
				}
				printConfigPlan(cmd.OutOrStdout(), cmd.ErrOrStderr(), p, true)
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&secretDir, "secret-dir", importer.DefaultSecretDir, "where the jobs' password and environment files are, for a tool that keeps them inline (autorestic, Backrest)")
	cmd.Flags().BoolVar(&plan, "plan", false, "print what holdfast apply would do with the YAML, instead of the YAML")
	return cmd
}
