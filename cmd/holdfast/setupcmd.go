package main

import (
	"os"

	"github.com/spf13/cobra"

	"github.com/holdfast-backup/holdfast/setup"
)

func newSetupCmd(g *globals) *cobra.Command {
	cfg := setup.Config{}
	cmd := &cobra.Command{
		Use:   "setup",
		Short: "Set holdfast up on this host: its database, the schema, the service (run again: changes nothing)",
		Long: `Set holdfast up on a host where its package is installed, as root.

Without a database in the environment file, it creates a role and a database on the local
PostgreSQL (through its socket, as the postgres user), writes their address with a new password
into the environment file (mode 0600), applies the schema, and enables and starts the service.
Each step looks first at what is there: run again, it changes nothing. With --dsn it writes that
address instead, for a database elsewhere.`,
		Example: "  apt install ./holdfast_*.deb postgresql\n  holdfast setup",
		Args:    exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := cfg.Validate(); err != nil {
				return inputError{err}
			}
			if os.Geteuid() != 0 {
				return badInput("setup needs root: run it with sudo")
			}
			if cmd.Flag("dsn").Changed {
				cfg.DSN = g.dsn
			}
			exe, err := g.env.executable()
			if err != nil {
				return err
			}
			cfg.Executable, cfg.Out = exe, cmd.OutOrStdout()
			return setup.Run(cmd.Context(), cfg)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.EnvFile, "env-file", setup.DefaultEnvFile, "the daemon's environment file, where the database's address goes")
	f.StringVar(&cfg.Role, "role", setup.DefaultRole, "the role to create on the local PostgreSQL")
	f.StringVar(&cfg.Database, "database", setup.DefaultDatabase, "the database to create on the local PostgreSQL")
	f.StringVar(&cfg.Service, "service", setup.DefaultService, "the daemon's systemd unit")
	f.BoolVar(&cfg.NoService, "no-service", false, "leave the service alone (neither enable nor start it)")
	return cmd
}

// newSetupDatabaseCmd is what setup runs as the local server's superuser (setup.Provision).
func newSetupDatabaseCmd() *cobra.Command {
	return &cobra.Command{
		Use:    setup.ProvisionCommand,
		Hidden: true,
		Args:   exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return setup.RunProvision(cmd.Context(), cmd.InOrStdin(), cmd.OutOrStdout())
		},
	}
}
