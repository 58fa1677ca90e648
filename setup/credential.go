package setup

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// The database's address kept encrypted (setup --encrypt): systemd-creds encrypts it, with the
// host's key and a TPM2 where there is one, into DefaultDSNCredentialFile; the daemon's unit gets
// it decrypted, as the credential DSNCredential, through LoadCredentialEncrypted= (a drop-in of
// setup's); a command run as root decrypts it with systemd-creds, finding the file by the
// environment file's DSNCredentialKey line, which names it and holds no secret.
const (
	DSNCredential            = "holdfast-dsn"
	DefaultDSNCredentialFile = "/etc/holdfast/database.cred"
	DSNCredentialKey         = "HOLDFAST_DSN_CREDENTIAL"
	credentialDropInName     = "database-credential.conf"
	systemdCreds             = "systemd-creds"
)

// EncryptedDSN returns the database's address kept encrypted: from the daemon's own credentials
// (credsDir, its unit's $CREDENTIALS_DIRECTORY, into which systemd decrypted it), else from file
// (the environment file's DSNCredentialKey), which systemd-creds decrypts. "" if neither holds it.
func EncryptedDSN(ctx context.Context, credsDir, file string) (string, error) {
	if credsDir != "" {
		b, err := os.ReadFile(filepath.Join(credsDir, DSNCredential))
		if err == nil {
			return strings.TrimSpace(string(b)), nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("the database's address, credential %s: %w", DSNCredential, err)
		}
	}
	if file == "" {
		return "", nil
	}
	dsn, err := decryptDSN(ctx, file)
	if err != nil {
		return "", fmt.Errorf("the database's address, %s (%s): %w (the service loads it through its drop-in, which holdfast setup writes)", file, DSNCredentialKey, err)
	}
	return dsn, nil
}

// checkCredentialFile refuses a credential file's path that the environment file or the
// drop-in could not hold as it is: relative, or with a space, a quote, a '%' (a specifier to
// systemd) or another character either would read otherwise.
func checkCredentialFile(path string) error {
	if !filepath.IsAbs(path) || strings.ContainsAny(path, "\n\r\"'\\ \t#;%$") {
		return fmt.Errorf("credential file %q: give an absolute path without spaces, quotes or any of #;%%$\\", path)
	}
	return nil
}

// checkEncrypt makes sure systemd-creds encrypts here before anything else is done: a role made
// or given a new password whose address could not then be kept would be lost.
func checkEncrypt(ctx context.Context) error {
	if _, err := creds(ctx, []byte("holdfast setup"), "encrypt", "--name="+DSNCredential, "-", "-"); err != nil {
		return fmt.Errorf("--encrypt: %w", err)
	}
	return nil
}

// decryptDSN has systemd-creds decrypt the address in file, as its credential DSNCredential.
func decryptDSN(ctx context.Context, file string) (string, error) {
	out, err := creds(ctx, nil, "decrypt", "--name="+DSNCredential, file, "-")
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(out)), nil
}

// encryptDSN writes dsn into file, encrypted by systemd-creds as the credential DSNCredential,
// root's and 0600 (systemd-creds would leave its own output readable to all), replacing what
// was there whole.
func encryptDSN(ctx context.Context, dsn, file string) error {
	sealed, err := creds(ctx, []byte(dsn), "encrypt", "--name="+DSNCredential, "-", "-")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return err
	}
	return replace(file, sealed)
}

// creds runs systemd-creds with argv and input on its standard input, and returns its output.
func creds(ctx context.Context, input []byte, argv ...string) ([]byte, error) {
	bin, err := exec.LookPath(systemdCreds)
	if err != nil {
		return nil, fmt.Errorf("%s not found: an encrypted credential needs systemd 250 or later", systemdCreds)
	}
	cmd := exec.CommandContext(ctx, bin, argv...)
	cmd.Stdin = bytes.NewReader(input)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w: %s", systemdCreds, argv[0], err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

// credentialDropInPath is the drop-in of the daemon's unit that loads the encrypted address.
func credentialDropInPath(cfg Config) string {
	return filepath.Join(cfg.UnitDir, cfg.Service+".d", credentialDropInName)
}

// credentialDropInText is that drop-in.
func credentialDropInText(file string) []byte {
	return []byte("# Written by holdfast setup --encrypt: the database's address, decrypted by the service\n" +
		"# manager for the daemon alone.\n[Service]\nLoadCredentialEncrypted=" + DSNCredential + ":" + file + "\n")
}

// writeCredentialDropIn writes the service's drop-in that loads the encrypted address, unless it is
// there as it would be written; it reports whether it wrote it.
func writeCredentialDropIn(cfg Config) (bool, error) {
	path, text := credentialDropInPath(cfg), credentialDropInText(cfg.DSNCredentialFile)
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, text) {
		return false, nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return false, fmt.Errorf("service: %w", err)
	}
	if err := replace(path, text); err != nil {
		return false, fmt.Errorf("service: write %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		return false, fmt.Errorf("service: %w", err)
	}
	return true, nil
}

// droppedInAfter reports whether the drop-in was written after startedUsec (a unit's
// ActiveEnterTimestamp, in microseconds since the epoch; 0 if it has not been active).
func droppedInAfter(cfg Config, startedUsec uint64) bool {
	fi, err := os.Stat(credentialDropInPath(cfg))
	return err == nil && startedUsec > 0 && fi.ModTime().UnixMicro() > int64(startedUsec)
}
