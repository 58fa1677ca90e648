package engine

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestValidateReadDataSubset(t *testing.T) {
	for _, tc := range []struct {
		in string
		ok bool
	}{
		{"5%", true}, {"100%", true}, {"0.5%", true}, {"1/7", true}, {"7/7", true},
		{"0%", false}, {"150%", false}, {"100.1%", false}, {"%", false}, {"-5%", false}, {"1e1%", false},
		{"0/7", false}, {"8/7", false}, {"1/0", false}, {"1/", false}, {"a/b", false}, {"5", false}, {"", false},
		{"NaN%", false}, {"+5%", false}, {"1/2/3", false},
	} {
		if err := ValidateReadDataSubset(tc.in); (err == nil) != tc.ok {
			t.Errorf("ValidateReadDataSubset(%q) = %v, want ok %v", tc.in, err, tc.ok)
		}
	}
}

// FuzzValidateReadDataSubset: whatever it accepts, restic's own forms accept: a percentage in
// (0, 100] or n/t with 1 <= n <= t. It never panics.
func FuzzValidateReadDataSubset(f *testing.F) {
	for _, s := range []string{"5%", "1/7", "0%", "150%", "3/2", "", "1e2%", "01/02"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if ValidateReadDataSubset(s) != nil {
			return
		}
		if !strings.HasSuffix(s, "%") && !strings.Contains(s, "/") {
			t.Fatalf("accepted %q, neither a percentage nor n/t", s)
		}
	})
}

func TestSampleFiles(t *testing.T) {
	id := strings.Repeat("ab", 32)
	listing := `{"struct_type":"snapshot","id":"` + id + `"}
{"struct_type":"node","type":"dir","path":"/d"}
{"struct_type":"node","type":"file","path":"/d/a","size":3}
{"struct_type":"node","type":"symlink","path":"/d/l"}
{"struct_type":"node","type":"file","path":"/d/b","size":5}
{"struct_type":"node","type":"file","path":"relative","size":5}
{"struct_type":"node","type":"file","path":"/d/c","size":7}
`
	rng := rand.New(rand.NewPCG(1, 2))
	s, err := SampleFiles(strings.NewReader(listing), 2, rng)
	if err != nil {
		t.Fatal(err)
	}
	if s.SnapshotID != id || s.Candidates != 3 || len(s.Files) != 2 || s.Files[0] == s.Files[1] {
		t.Fatalf("sample = %+v, want 2 distinct of the 3 regular files of %s", s, id)
	}
	all, err := SampleFiles(strings.NewReader(listing), 10, rng)
	if err != nil || len(all.Files) != 3 {
		t.Fatalf("a sample larger than the snapshot = %+v, %v; want its 3 files", all, err)
	}
	for _, bad := range []string{
		"", // no snapshot line
		`{"struct_type":"node","type":"file","path":"/a","size":1}`, // files before the snapshot
		`{"struct_type":"snapshot","id":"short"}`,                   // not a full id
		"not json",
	} {
		if _, err := SampleFiles(strings.NewReader(bad), 1, rng); err == nil {
			t.Errorf("SampleFiles(%q) accepted it", bad)
		}
	}
}

// FuzzSampleFiles: a listing the job's user may have shaped never panics, and a sample only
// holds absolute paths of the listing, at most n.
func FuzzSampleFiles(f *testing.F) {
	f.Add(`{"struct_type":"snapshot","id":"`+strings.Repeat("0", 64)+`"}`+"\n"+`{"struct_type":"node","type":"file","path":"/a","size":1}`, 1)
	f.Add("{}\n{", 3)
	f.Fuzz(func(t *testing.T, listing string, n int) {
		if n < 1 || n > MaxDrillFiles {
			return
		}
		s, err := SampleFiles(strings.NewReader(listing), n, rand.New(rand.NewPCG(1, 1)))
		if err != nil {
			return
		}
		if len(s.Files) > n || int64(len(s.Files)) > s.Candidates {
			t.Fatalf("sample of %d files from %d candidates, n = %d", len(s.Files), s.Candidates, n)
		}
		for _, f := range s.Files {
			if !strings.HasPrefix(f.Path, "/") || !strings.Contains(listing, f.Path[1:]) {
				t.Fatalf("sampled %q, not an absolute path of the listing", f.Path)
			}
		}
	})
}

func TestGlobEscape(t *testing.T) {
	for in, want := range map[string]string{"/a/b c": "/a/b c", "/x*y?[z]": `/x\*y\?\[z\]`, `/back\slash`: `/back\\slash`} {
		if got := GlobEscape(in); got != want {
			t.Errorf("GlobEscape(%q) = %q, want %q", in, got, want)
		}
	}
}

// A damaged pack is one finding on every restic: check's standard error as each printed it for
// one pack overwritten in part (0.16.4's for a tree's pack, with its indented continuation, and
// 0.18.1's, with the advice below it).
func TestCheckFindings(t *testing.T) {
	pack := strings.Repeat("83ea4945", 8)
	outputs := map[string]struct {
		lines []string
		first string
	}{
		"0.14.0": {[]string{"Pack ID does not match, want 21d30adb, got 929f209a", "Fatal: repository contains errors"},
			"Pack ID does not match, want 21d30adb, got 929f209a"},
		"0.16.4 tree": {[]string{"error for tree 90539b14:", "  decrypting blob 90539b14 failed: ciphertext verification failed",
			"Fatal: repository contains errors"}, "error for tree 90539b14:"},
		"0.18.1": {[]string{
			"pack " + pack + " contains 2 errors: [blob 6a7c3d68: decrypting blob <data/6a7c3d68> from 83ea4945 failed: ciphertext verification failed]",
			"",
			"The repository contains damaged pack files. These damaged files must be removed to repair the repository. This can be done using the following commands. Please read the troubleshooting guide at https://restic.readthedocs.io/en/stable/077_troubleshooting.html first.",
			"",
			"restic repair packs " + pack,
			"restic repair snapshots --forget",
			"",
			"Damaged pack files can be caused by backend problems, hardware problems or bugs in restic. Please open an issue at https://github.com/restic/restic/issues/new/choose for further troubleshooting!",
			"Fatal: repository contains errors",
		}, "pack " + pack + " contains 2 errors: [blob 6a7c3d68: decrypting blob <data/6a7c3d68> from 83ea4945 failed: ciphertext verification failed]"},
	}
	for name, out := range outputs {
		var findings []ItemError
		fatal := ""
		for _, l := range out.lines {
			ev, ok := Restic{Operation: OpVerify}.ParseStderr([]byte(l))
			switch p := ev.Payload.(type) {
			case ItemError:
				findings = append(findings, p)
			case Fatal:
				fatal = p.Message
			default:
				if ok {
					t.Errorf("%s: %q read as %+v", name, l, ev)
				}
			}
		}
		if len(findings) != 1 || findings[0].Message != out.first || fatal != "Fatal: repository contains errors" {
			t.Errorf("%s: findings %+v, fatal %q; want one: %q", name, findings, fatal, out.first)
		}
	}
}

func TestRestoreAndCheckOutput(t *testing.T) {
	restore := Restic{Operation: OpRestore}
	ev, ok := restore.ParseStderr([]byte("ignoring error for /src/a: ciphertext verification failed"))
	if ie, isItem := ev.Payload.(ItemError); !ok || !isItem || ie.Item != "/src/a" || ie.Message != "ciphertext verification failed" {
		t.Fatalf("restore's error line = %+v", ev)
	}
	check := Restic{Operation: OpVerify}
	ev, ok = check.ParseStderr([]byte("Pack ID does not match, want a1f4, got b86b"))
	if ie, isItem := ev.Payload.(ItemError); !ok || !isItem || ie.During != "check" {
		t.Fatalf("check's finding = %+v", ev)
	}
	if ev, _ := check.ParseStderr([]byte("Fatal: repository contains errors")); ev.Type != TypeFatal {
		t.Fatalf("check's last word = %+v, want fatal", ev)
	}
	for _, tc := range []struct {
		ev     Evidence
		status string
		class  Class
		reason string
	}{
		{Evidence{Operation: OpVerify}, Succeeded, "", "no errors"},
		{Evidence{Operation: OpVerify, ExitStatus: 1, ItemErrors: 2, FirstItemError: "Pack ID does not match", Fatal: "Fatal: repository contains errors"},
			Failed, Permanent, "2 findings, first: Pack ID does not match"},
		{Evidence{Operation: OpVerify, ExitStatus: 1, Fatal: "Fatal: wrong password or no key found"}, Failed, Permanent, "password is wrong"},
		{Evidence{Operation: OpRestore, ExitStatus: 1, ItemErrors: 1, FirstItemError: "/a: ciphertext", Fatal: "Fatal: There were 1 errors"},
			Failed, Permanent, "restore failed: 1 file could not be restored"},
		{Evidence{Operation: OpDrill}, Succeeded, "", "drill complete"},
		{Evidence{Operation: OpDrill, ExitStatus: 130}, Interrupted, "", "SIGINT"},
		{Evidence{ExitStatus: 1, Fatal: "before hook /bin/false exited 1"}, Failed, Permanent, "before hook /bin/false exited 1; the engine did not run"},
		{Evidence{ExitStatus: 75, Fatal: "before hook /x exited 75: it asked that this backup be skipped"}, Skipped, "", "skipped: before hook /x"},
		{Evidence{ExitStatus: 75, Fatal: "Fatal: something else"}, Failed, "", "restic exited with status 75"}, // restic's own 75 is no skip
	} {
		o := Restic{}.Classify(tc.ev)
		if o.Status != tc.status || o.Class != tc.class || !strings.Contains(o.Reason, tc.reason) {
			t.Errorf("Classify(%+v) = %+v, want %s %s with %q", tc.ev, o, tc.status, tc.class, tc.reason)
		}
	}
}

func TestTreeProgress(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "a"), make([]byte, 100), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/passwd", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	p, ok := TreeProgress(dir, 400, 4)()
	if !ok || p.FilesDone != 1 || p.BytesDone != 100 || p.PercentDone != 0.25 || p.TotalBytes != 400 {
		t.Fatalf("progress = %+v, %v; want 1 file, 100 of 400 bytes (the link not followed)", p, ok)
	}
}
