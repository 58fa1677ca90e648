package setup

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/holdfast-backup/holdfast/testenv"
)

func TestMain(m *testing.M) { testenv.RunMain(m) }

// The verifier of RFC 7677's example (user "user", password "pencil", its salt, 4096
// iterations) proves the example's exchange: the client's proof yields a ClientKey whose hash is
// the StoredKey, and the ServerKey signs the exchange as the RFC's server did.
func TestScramVerifierRFC7677(t *testing.T) {
	salt, _ := base64.StdEncoding.DecodeString("W22ZaJ0SNY7soEsUEjb6gQ==")
	v, err := scramVerifier("pencil", salt, 4096)
	if err != nil {
		t.Fatal(err)
	}
	const want = "SCRAM-SHA-256$4096:W22ZaJ0SNY7soEsUEjb6gQ==$WG5d8oPm3OtcPnkdi4Uo7BkeZkBFzpcXkuLmtbsT4qY=:wfPLwcE6nTWhTAmQ7tl2KeoiWGPlZqQxSrmfPwDl2dU="
	storedKey, serverKey := scramKeys(t, v)
	nonce := "rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
	authMessage := "n=user,r=rOprNGfwEbeRWgbNEkqO," + "r=" + nonce + ",s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096," + "c=biws,r=" + nonce
	proof, _ := base64.StdEncoding.DecodeString("dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
	clientSignature := hmacSHA256(storedKey, authMessage)
	clientKey := make([]byte, len(proof))
	for i := range proof {
		clientKey[i] = proof[i] ^ clientSignature[i]
	}
	if h := sha256.Sum256(clientKey); !bytes.Equal(h[:], storedKey) {
		t.Errorf("the RFC's client proof does not match StoredKey of %s", v)
	}
	if sig := base64.StdEncoding.EncodeToString(hmacSHA256(serverKey, authMessage)); sig != "6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=" {
		t.Errorf("ServerSignature %s, want the RFC's 6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=", sig)
	}
	if v != want {
		t.Errorf("verifier %s\nwant     %s", v, want)
	}
	if len(storedKey) != sha256.Size || len(serverKey) != sha256.Size {
		t.Fatal("keys of the wrong size")
	}
}

// PostgreSQL computes the same verifier from a password and a salt as ScramVerifier does, and
// ScramVerifier refuses what it cannot compute as the server would (SASLprep of non-ASCII).
func TestScramVerifierAsPostgreSQL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, testenv.Postgres(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	role := "hf_scram_" + strings.ReplaceAll(uuid.NewString()[:8], "-", "")
	t.Cleanup(func() { conn.Exec(context.Background(), "DROP ROLE IF EXISTS "+role) })
	for _, password := range []string{"pencil", "Z3jK~!@#$%^&*()_+{}|:<>?`-=[];,./", "x"} {
		if _, err := conn.Exec(ctx, "SET password_encryption = 'scram-sha-256'"); err != nil {
			t.Fatal(err)
		}
		var stmt string
		if err := conn.QueryRow(ctx, "SELECT format('CREATE ROLE %I PASSWORD %L', $1::text, $2::text)", role, password).Scan(&stmt); err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Exec(ctx, stmt); err != nil {
			t.Fatal(err)
		}
		var server string
		if err := conn.QueryRow(ctx, "SELECT rolpassword FROM pg_authid WHERE rolname = $1", role).Scan(&server); err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Exec(ctx, "DROP ROLE "+role); err != nil {
			t.Fatal(err)
		}
		head, _, _ := strings.Cut(strings.TrimPrefix(server, "SCRAM-SHA-256$"), "$")
		iter, salt64, _ := strings.Cut(head, ":")
		n, _ := strconv.Atoi(iter)
		salt, _ := base64.StdEncoding.DecodeString(salt64)
		ours, err := scramVerifier(password, salt, n)
		if err != nil || ours != server {
			t.Errorf("password %q: ours %s (%v), the server's %s", password, ours, err, server)
		}
	}
	for _, bad := range []string{"", "pass word", "pässword", "tab\there"} {
		if v, err := ScramVerifier(bad); err == nil {
			t.Errorf("ScramVerifier(%q) = %s, want it refused", bad, v)
		}
	}
	a, _ := ScramVerifier("pencil")
	b, _ := ScramVerifier("pencil")
	if a == b {
		t.Errorf("two verifiers of one password are equal (%s): the salt must be new each time", a)
	}
}

func scramKeys(t *testing.T, v string) (storedKey, serverKey []byte) {
	t.Helper()
	_, keys, ok := strings.Cut(strings.TrimPrefix(v, "SCRAM-SHA-256$"), "$")
	stored64, server64, ok2 := strings.Cut(keys, ":")
	storedKey, err1 := base64.StdEncoding.DecodeString(stored64)
	serverKey, err2 := base64.StdEncoding.DecodeString(server64)
	if !ok || !ok2 || err1 != nil || err2 != nil {
		t.Fatalf("verifier %q is not SCRAM-SHA-256$i:salt$StoredKey:ServerKey", v)
	}
	return storedKey, serverKey
}

// The roles setup refuses before it asks the server anything, and the flags that contradict.
func TestValidateRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		want string // "" accepted
	}{
		{"the default role", Config{}, ""},
		{"a role of its own", Config{Role: "backup_hf"}, ""},
		{"postgres", Config{Role: "postgres"}, "the server's superuser"},
		{"Postgres", Config{Role: "POSTGRES"}, "the server's superuser"},
		{"the superuser given", Config{Role: "dba", Superuser: "dba"}, "the server's superuser"},
		{"pg_monitor", Config{Role: "pg_monitor"}, "PostgreSQL reserves"},
		{"pg_anything", Config{Role: "PG_x"}, "PostgreSQL reserves"},
		{"public", Config{Role: "public"}, "PostgreSQL reserves"},
		{"current_user", Config{Role: "current_user"}, "PostgreSQL reserves"},
		{"rotate with a DSN", Config{RotatePassword: true, DSN: "postgres://h/db"}, "no"},
		{"a relative web auth file", Config{WebAuthFile: "web.auth"}, "relative path"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("%v, want an error saying %q", err, tc.want)
			}
		})
	}
}

// Where the address of a database elsewhere comes from: the command line, standard input
// (--dsn -) or a file (--dsn-file); what was read is never quoted in an error.
func TestDSNFrom(t *testing.T) {
	dir := t.TempDir()
	file := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	const dsn = "postgres://hf:s3cret@db.example:5432/holdfast"
	groupWritable := file("group-writable", dsn)
	if err := os.Chmod(groupWritable, 0o620); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(file("target", dsn), link); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name       string
		arg        string
		given      bool
		file       string
		stdin      string
		want, fail string
	}{
		{"nothing given", "", false, "", "", "", ""},
		{"the environment file's, not given", "postgres://from-env", false, "", "", "", ""},
		{"on the command line", dsn, true, "", "", dsn, ""},
		{"empty on the command line", "", true, "", "", "", "Setup.DSN is empty"},
		{"on standard input", "-", true, "", dsn + "\n", dsn, ""},
		{"on standard input, no newline", "-", true, "", dsn, dsn, ""},
		{"nothing on standard input", "-", true, "", "\n", "", "standard input holds no address"},
		{"two lines on standard input", "-", true, "", dsn + "\nsecret-two\n", "", "more than one line"},
		{"in a file", "", false, file("one", dsn+"\n"), "", dsn, ""},
		{"in a file, among blanks", "", false, file("blank", "\n  "+dsn+"  \n\n"), "", dsn, ""},
		{"an empty file", "", false, file("empty", ""), "", "", "holds no address"},
		{"a file of two lines", "", false, file("two", dsn+"\nHOLDFAST_X=secret-two\n"), "", "", "more than one line"},
		{"a huge file", "", false, file("huge", strings.Repeat("secret-two", 4<<10)), "", "", "more than 16 KiB"},
		{"a missing file", "", false, filepath.Join(dir, "none"), "", "", "no such file"},
		{"a file its group may write", "", false, groupWritable, "", "", "has mode 0620: its group or others could change it (chmod go-w "},
		{"a link", "", false, link, "", "", "is a symbolic link"},
		{"a FIFO", "", false, fifo, "", "", "is not a regular file"},
		{"both", dsn, true, file("both", dsn), "", "", "not both"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DSNFrom(tc.arg, tc.given, tc.file, strings.NewReader(tc.stdin))
			switch {
			case tc.fail == "" && (err != nil || got != tc.want):
				t.Fatalf("%q, %v; want %q", got, err, tc.want)
			case tc.fail != "" && (err == nil || !strings.Contains(err.Error(), tc.fail)):
				t.Fatalf("%q, %v; want an error saying %q", got, err, tc.fail)
			case err != nil && (strings.Contains(err.Error(), "s3cret") || strings.Contains(err.Error(), "secret-two")):
				t.Fatalf("the error quotes what was read: %v", err)
			}
		})
	}
}

// The web auth step makes one bearer token of 32 or more URL-safe characters, root's (here: the
// test's user's), mode 0600; run again it leaves the file as it is; a file the daemon would
// refuse (a link, one others read) is refused and left alone.
func TestWebAuth(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "etc", "web.auth")
	var out bytes.Buffer
	cfg := Config{WebAuthFile: path, Out: &out}
	if err := webAuth(cfg); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	token, ok := strings.CutPrefix(strings.TrimSuffix(string(data), "\n"), "bearer ")
	if !ok || len(token) < 32 || strings.Trim(token, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_") != "" || strings.Count(string(data), "\n") != 1 {
		t.Fatalf("web.auth holds %q, want one line \"bearer <32 or more URL-safe characters>\"", data)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 || !fi.Mode().IsRegular() {
		t.Fatalf("web.auth: %v, want a regular file of mode 0600", fi.Mode())
	}
	if err := webAuth(cfg); err != nil {
		t.Fatal(err)
	}
	if again, _ := os.ReadFile(path); !bytes.Equal(again, data) {
		t.Fatal("run again, the web auth step changed the file")
	}
	if got, want := out.String(), "web: "+path+" created (a bearer token for the dashboard and /metrics, root's, mode 0600)\nweb: "+path+" present, left as it is\n"; got != want {
		t.Fatalf("steps said:\n%s\nwant:\n%s", got, want)
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Fatalf("the directory holds %d entries, want web.auth alone (no temporary file left)", len(entries))
	}

	open := filepath.Join(dir, "open")
	if err := os.WriteFile(open, []byte("bearer "+strings.Repeat("a", 40)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(path, link); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{open, link} {
		before, _ := os.Lstat(bad)
		err := webAuth(Config{WebAuthFile: bad, Out: &out})
		if err == nil || !strings.Contains(err.Error(), "would refuse it") {
			t.Errorf("%s: %v, want it refused", bad, err)
		}
		if after, _ := os.Lstat(bad); after.Mode() != before.Mode() || after.ModTime() != before.ModTime() {
			t.Errorf("%s was changed", bad)
		}
	}
}
