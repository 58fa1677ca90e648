package credentials

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestParseEnv(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    []string
		wantErr string
	}{
		{"empty", "", nil, ""},
		{"plain", "A=1\nB_2=x y\n", []string{"A=1", "B_2=x y"}, ""},
		{"comments and blanks", "# c\n\n  AWS_ACCESS_KEY_ID=abc  \n", []string{"AWS_ACCESS_KEY_ID=abc"}, ""},
		{"quotes", "A=\"q v\"\nB='s'\nC=\"half\n", []string{"A=q v", "B=s", "C=\"half"}, ""},
		{"export prefix", "export A=1\n", []string{"A=1"}, ""},
		{"equals in value", "A=b=c\n", []string{"A=b=c"}, ""},
		{"no equals", "A=1\nsecretvalue\n", nil, "line 2 is not KEY=VALUE"},
		{"bad name", "1A=x\n", nil, "line 1 is not KEY=VALUE"},
		{"nul", "A=x\x00y\n", nil, "line 1 holds a NUL byte"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseEnv([]byte(tt.in))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				if strings.Contains(err.Error(), "secretvalue") {
					t.Fatalf("error quotes the file: %v", err)
				}
				return
			}
			if err != nil || !slices.Equal(got, tt.want) {
				t.Fatalf("got %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

func TestEnviron(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, Env), []byte("B2_ACCOUNT_KEY=k\nRESTIC_PASSWORD_FILE=/elsewhere\n"), 0o400); err != nil {
		t.Fatal(err)
	}
	t.Setenv(DirVariable, dir)
	got, err := Environ([]string{"PATH=/bin"}, true, true)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"PATH=/bin", "B2_ACCOUNT_KEY=k", "RESTIC_PASSWORD_FILE=/elsewhere", "RESTIC_PASSWORD_FILE=" + filepath.Join(dir, Password)}
	if !slices.Equal(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
	t.Setenv(DirVariable, "")
	if _, err := Environ(nil, true, false); err == nil || !strings.Contains(err.Error(), DirVariable) {
		t.Fatalf("without a credentials directory: err = %v", err)
	}
	if got, err := Environ([]string{"A=1"}, false, false); err != nil || !slices.Equal(got, []string{"A=1"}) {
		t.Fatalf("no credentials: %q, %v", got, err)
	}
}

func TestCheckRepository(t *testing.T) {
	for repo, refused := range map[string]bool{
		"/srv/restic":                          false,
		"local:/srv/restic":                    false,
		"sftp:backup@host:/srv/restic":         false,
		"sftp://backup@host//srv/restic":       false,
		"rest:https://host:8000/repo":          false,
		"rest:https://user:secret@host:8000/":  true,
		"s3:https://key:secret@s3.example/bkt": true,
		"rest:https://user@host/p:a:th":        false,
	} {
		err := CheckRepository(repo)
		if (err != nil) != refused {
			t.Errorf("CheckRepository(%q) = %v, refused want %v", repo, err, refused)
		}
		if err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("the message quotes the secret: %v", err)
		}
	}
}
