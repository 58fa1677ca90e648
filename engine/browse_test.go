package engine

import (
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"testing"
)

// Lines of `restic ls --json` as 0.14 and as 0.17 and later print them.
const (
	lsSnapshot014 = `{"time":"2026-12-07T08:00:00Z","tree":"aa","paths":["/srv"],"hostname":"h","id":"` + id64 + `","short_id":"0123abcd","struct_type":"snapshot"}`
	lsNode014     = `{"name":"report.txt","type":"file","path":"/srv/report.txt","uid":0,"gid":0,"size":18,"mode":420,"permissions":"-rw-r--r--","mtime":"2026-12-07T07:59:00Z","atime":"2026-12-07T07:59:00Z","ctime":"2026-12-07T07:59:00Z","struct_type":"node"}`
	lsDir019      = `{"name":"a\nb","type":"dir","path":"/srv/a\nb","uid":1,"gid":2,"mode":2147484141,"permissions":"drwxr-xr-x","mtime":"2026-12-07T07:59:00Z","atime":"2026-12-07T07:59:00Z","ctime":"2026-12-07T07:59:00Z","inode":77,"message_type":"node","struct_type":"node"}`
	id64          = "0123abcd0123abcd0123abcd0123abcd0123abcd0123abcd0123abcd0123abcd"
	id64b         = "fedc4321fedc4321fedc4321fedc4321fedc4321fedc4321fedc4321fedc4321"
)

func collectLs(out string) ([]Node, error) {
	var nodes []Node
	err := ParseLs(strings.NewReader(out), func(n Node) error { nodes = append(nodes, n); return nil })
	return nodes, err
}

func collectFind(out string) ([]Found, error) {
	var found []Found
	err := ParseFind(strings.NewReader(out), func(f Found) error { found = append(found, f); return nil })
	return found, err
}

func TestParseLs(t *testing.T) {
	nodes, err := collectLs(lsSnapshot014 + "\n" + lsNode014 + "\n" + lsDir019 + "\n")
	if err != nil || len(nodes) != 2 {
		t.Fatalf("ParseLs = %+v, %v; want the two nodes", nodes, err)
	}
	if n := nodes[0]; n.Path != "/srv/report.txt" || n.Type != "file" || n.Size == nil || *n.Size != 18 || n.Mode.String() != "-rw-r--r--" {
		t.Errorf("the file = %+v", n)
	}
	if n := nodes[1]; n.Path != "/srv/a\nb" || n.Type != "dir" || n.Size != nil || !n.Mode.IsDir() || n.UID != 1 || n.GID != 2 {
		t.Errorf("the directory = %+v", n)
	}
	for _, c := range []struct{ name, out, err string }{
		{"not JSON", "Fatal: wrong password\n", "read restic's listing"},
		{"a relative path", strings.Replace(lsNode014, `"/srv/report.txt"`, `"srv/report.txt"`, 1), "is not a clean absolute path"},
		{"a path that climbs out", strings.Replace(lsNode014, `"/srv/report.txt"`, `"/srv/../../etc/shadow"`, 1), "is not a clean absolute path"},
		{"a type restic has none of", strings.Replace(lsNode014, `"type":"file"`, `"type":"`+strings.Repeat("x", 1000)+`"`, 1), "which restic has none of"},
		{"a line no entry has", `{"struct_type":"node","path":"/` + strings.Repeat("x", maxNodeLine) + `"}`, "a line of over"},
	} {
		if _, err := collectLs(c.out); err == nil || !strings.Contains(err.Error(), c.err) {
			t.Errorf("%s: ParseLs = %v, want an error saying %q", c.name, err, c.err)
		}
	}
	// An error of the caller's stops the listing.
	stop := errors.New("stop")
	calls := 0
	err = ParseLs(strings.NewReader(lsNode014+"\n"+lsNode014+"\n"), func(Node) error { calls++; return stop })
	if !errors.Is(err, stop) || calls != 1 {
		t.Errorf("ParseLs with a failing callback = %v after %d calls", err, calls)
	}
}

func findNode(path string, size int) string {
	return fmt.Sprintf(`{"path":%q,"permissions":"-rw-r--r--","type":"file","mode":420,"mtime":"2026-12-07T07:59:00Z","uid":0,"gid":0,"size":%d}`, path, size)
}

func TestParseFind(t *testing.T) {
	out := `[{"matches":[` + findNode("/srv/report.txt", 18) + `,` + findNode("/srv/old/report.txt", 5) + `],"hits":2,"snapshot":"` + id64 + `"},` +
		`{"matches":[` + findNode("/srv/report.txt", 42) + `],"hits":1,"snapshot":"` + id64b + `"}]` + "\n"
	found, err := collectFind(out)
	if err != nil || len(found) != 3 {
		t.Fatalf("ParseFind = %+v, %v; want three", found, err)
	}
	if found[0].Snapshot != id64 || found[1].Snapshot != id64 || found[2].Snapshot != id64b || *found[2].Node.Size != 42 {
		t.Errorf("found = %+v", found)
	}
	if found, err := collectFind("[]\n"); err != nil || len(found) != 0 {
		t.Errorf("nothing found: %v, %v", found, err)
	}
	many := make([]string, MaxFoundPerSnapshot+1)
	for i := range many {
		many[i] = findNode(fmt.Sprintf("/f%d", i), 1)
	}
	for _, c := range []struct{ name, out, err string }{
		{"not an array", `{"matches":[]}`, "want a JSON array"},
		{"no snapshot's id", `[{"matches":[` + findNode("/a", 1) + `],"hits":1,"snapshot":"nope"}]`, "not a snapshot's id"},
		{"a relative path", `[{"matches":[` + findNode("a", 1) + `],"hits":1,"snapshot":"` + id64 + `"}]`, "is not a clean absolute path"},
		{"too many", `[{"matches":[` + strings.Join(many, ",") + `],"hits":1,"snapshot":"` + id64 + `"}]`, "narrow it"},
		{"a value no entry has", `[{"matches":[` + findNode("/"+strings.Repeat("x", 2*maxNodeLine), 1) + `]}]`, "a value of over"},
		{"cut short", `[{"matches":[` + findNode("/a", 1), "read restic's search"},
	} {
		if _, err := collectFind(c.out); err == nil || !strings.Contains(err.Error(), c.err) {
			t.Errorf("%s: ParseFind = %v, want an error saying %q", c.name, err, c.err)
		}
	}
}

func FuzzParseLs(f *testing.F) {
	for _, seed := range []string{lsSnapshot014 + "\n" + lsNode014 + "\n", lsDir019, "", "\n\n", "{}", `{"struct_type":"node"}`, "Fatal: x"} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, out []byte) {
		_ = ParseLs(strings.NewReader(string(out)), func(n Node) error {
			if !strings.HasPrefix(n.Path, "/") || strings.ContainsRune(n.Path, 0) || path.Clean(n.Path) != n.Path || !nodeTypes[n.Type] {
				t.Fatalf("ParseLs handed on %+v", n)
			}
			return nil
		})
	})
}

func FuzzParseFind(f *testing.F) {
	for _, seed := range []string{`[{"matches":[` + findNode("/a", 1) + `],"hits":1,"snapshot":"` + id64 + `"}]`, "[]", "", "[", `[{"snapshot":"` + id64 + `"}]`, `[{"matches":[{}]}]`} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, out []byte) {
		_ = ParseFind(io.LimitReader(strings.NewReader(string(out)), 1<<20), func(fd Found) error {
			if !fullID().MatchString(fd.Snapshot) || !strings.HasPrefix(fd.Node.Path, "/") {
				t.Fatalf("ParseFind handed on %+v", fd)
			}
			return nil
		})
	})
}
