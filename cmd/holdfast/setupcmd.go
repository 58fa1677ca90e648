package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/holdfast-backup/holdfast/setup"
)

func newSetupCmd(g *globals) *cobra.Command {
	cfg := setup.Config{}
	var dsnFile string
	cmd := &cobra.Command{
		Use:   "setup",
		Short: "Set holdfast up on this host: its database, the schema, the service (run again: changes nothing)",
		Long: `Set holdfast up on a host where its package is installed, as root.

Without a database in the environment file, it creates a role and a database on the local
PostgreSQL (through its socket, as the postgres user), writes their address with a new password
into the environment file (mode 0600), applies the schema, creates the dashboard's and
/metrics' credentials (--web-auth-file, a bearer token, mode 0600) if there are none, and
enables and starts the service. Each step looks first at what is there: run again, it changes
nothing. The server is given the password's SCRAM-SHA-256 verifier, computed here, never the
password.

A role that exists already keeps its password (another host may log in with it): setup then
stops and says so, unless --rotate-password asks for a new one. The server's superuser and
PostgreSQL's reserved roles (pg_*) are refused as --role.

For a database elsewhere give its address: --dsn-file FILE (the address alone, one line; a
regular file, not a link, that no one but root could have written, as apply's files) or
--dsn - (read from standard input) keep it out of the command line, which every user of the
host sees in ps; --dsn ADDRESS works too.

With --encrypt the address (which holds the role's password) is never written in plain: it is
kept encrypted by systemd-creds in --credential-file, the environment file names that file
(HOLDFAST_DSN_CREDENTIAL), and a drop-in has the service load it decrypted, for the daemon alone
(LoadCredentialEncrypted=); a command run as root decrypts it with systemd-creds. Run on a host
set up before, it moves the address out of the environment file.`,
		Example: "  apt install ./holdfast_*.deb postgresql\n  holdfast setup\n  holdfast setup --dsn-file /root/holdfast.dsn\n  holdfast setup --dsn - <<<\"$DSN\"\n  holdfast setup --encrypt",
		Args:    exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			dsn, err := setup.DSNFrom(g.dsn, cmd.Flag("dsn").Changed, dsnFile, cmd.InOrStdin())
			if err != nil {
				return inputError{err}
			}
			cfg.DSN = dsn
			if err := cfg.Validate(); err != nil {
				return inputError{err}
			}
			if os.Geteuid() != 0 {
				return badInput("setup needs root: run it with sudo")
			}
			if cmd.Flag("dsn").Changed && g.dsn != setup.StdinDSN {
				fmt.Fprintln(cmd.ErrOrStderr(), "note: an address given with --dsn on the command line is seen by every user of this host (ps); --dsn-file FILE or --dsn - keep it out")
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
	f.StringVar(&dsnFile, "dsn-file", "", "a file holding the address of a database elsewhere, alone on one line (--dsn - reads it from standard input)")
	f.BoolVar(&cfg.RotatePassword, "rotate-password", false, "give the local role a new password even though it exists (whoever else logs in as it needs the new address)")
	f.StringVar(&cfg.WebAuthFile, "web-auth-file", setup.DefaultWebAuthFile, "the daemon's listener's credentials, created with a bearer token if missing")
	f.StringVar(&cfg.Role, "role", setup.DefaultRole, "the role to create on the local PostgreSQL")
	f.StringVar(&cfg.Database, "database", setup.DefaultDatabase, "the database to create on the local PostgreSQL")
	f.StringVar(&cfg.Service, "service", setup.DefaultService, "the daemon's systemd unit")
	f.BoolVar(&cfg.NoService, "no-service", false, "leave the service alone (neither enable nor start it)")
	f.BoolVar(&cfg.Encrypt, "encrypt", false, "keep the database's address encrypted by systemd-creds (the host's key, and a TPM2 where there is one) in --credential-file instead of the environment file, which then names that file; the service loads it with LoadCredentialEncrypted= (a drop-in); an address kept so stays so")
	f.StringVar(&cfg.DSNCredentialFile, "credential-file", setup.DefaultDSNCredentialFile, "where --encrypt keeps the database's address")
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
