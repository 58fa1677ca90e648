package setup

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/holdfast-backup/holdfast/credentials"
	"github.com/holdfast-backup/holdfast/testenv"
)

// setup --encrypt moves the database's address out of the environment file, which then names
// the credential file instead: the address is there encrypted by systemd-creds (root's, 0600),
// and EncryptedDSN reads it back as a command does (systemd-creds decrypts it), or as the daemon
// does from its unit's credentials. Run again, with or without --encrypt, nothing changes: an
// address kept encrypted stays so.
func TestRunEncrypt(t *testing.T) {
	if os.Geteuid() != 0 || exec.Command("systemd-creds", "--version").Run() != nil {
		if ci, _ := strconv.ParseBool(os.Getenv("CI")); ci {
			t.Fatal("setup --encrypt needs root and systemd-creds (systemd 250 or later)")
		}
		t.Skip("setup --encrypt needs root and systemd-creds")
	}
	ctx := context.Background()
	dsn := testenv.Postgres(t)
	dir := t.TempDir()
	envFile, credFile := filepath.Join(dir, "holdfast.env"), filepath.Join(dir, "database.cred")
	if err := os.WriteFile(envFile, []byte("HOLDFAST_HOST=h1\nexport HOLDFAST_DSN="+dsn+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	cfg := Config{EnvFile: envFile, WebAuthFile: filepath.Join(dir, "web.auth"), DSNCredentialFile: credFile, NoService: true, Encrypt: true, Out: &out}
	if err := Run(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	env, err := ReadEnv(envFile)
	if err != nil {
		t.Fatal(err)
	}
	if _, plain := env[dsnKey]; plain || env[DSNCredentialKey] != credFile || env["HOLDFAST_HOST"] != "h1" {
		t.Fatalf("the environment file after setup --encrypt: %v; want no address, %s naming %s, the rest kept", env, DSNCredentialKey, credFile)
	}
	sealed, err := os.ReadFile(credFile)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(credFile)
	if err != nil {
		t.Fatal(err)
	}
	if !credentials.Encrypted(sealed) || fi.Mode().Perm() != 0o600 {
		t.Fatalf("%s: mode %v, encrypted %v; want systemd's encrypted credential, 0600", credFile, fi.Mode(), credentials.Encrypted(sealed))
	}
	if plain, _ := os.ReadFile(envFile); bytes.Contains(plain, []byte(dsn)) {
		t.Fatalf("the environment file still holds the address:\n%s", plain)
	}
	if !strings.Contains(out.String(), "moved out of "+envFile) {
		t.Fatalf("setup's report:\n%s", out.String())
	}
	if got, err := EncryptedDSN(ctx, "", credFile); err != nil || got != dsn {
		t.Fatalf("EncryptedDSN from %s = %q, %v; want the address", credFile, got, err)
	}
	unit := t.TempDir() // the daemon's credentials, as systemd decrypted them
	if err := os.WriteFile(filepath.Join(unit, DSNCredential), []byte(dsn), 0o400); err != nil {
		t.Fatal(err)
	}
	if got, err := EncryptedDSN(ctx, unit, "/nonexistent"); err != nil || got != dsn {
		t.Fatalf("EncryptedDSN from the unit's credentials = %q, %v", got, err)
	}

	envBefore, _ := os.ReadFile(envFile)
	for _, encrypt := range []bool{true, false} {
		again := cfg
		// The environment file's credential file, not the default, is where the address is.
		again.Encrypt, again.Out, again.DSNCredentialFile = encrypt, &out, filepath.Join(dir, "elsewhere.cred")
		if err := Run(ctx, again); err != nil {
			t.Fatal(err)
		}
		envAfter, _ := os.ReadFile(envFile)
		sealedAfter, _ := os.ReadFile(credFile)
		if !bytes.Equal(envAfter, envBefore) || !bytes.Equal(sealedAfter, sealed) {
			t.Fatalf("setup run again (--encrypt %v) changed the environment file or the credential:\n%s", encrypt, envAfter)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "elsewhere.cred")); err == nil {
		t.Fatal("setup run again wrote the address where its flag said, not where the environment file names")
	}
	// A credential that does not decrypt is said so, naming the file.
	if err := os.WriteFile(credFile, []byte("not a credential\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Run(ctx, cfg); err == nil || !strings.Contains(err.Error(), credFile) {
		t.Fatalf("setup with a credential that does not decrypt: %v", err)
	}
}
