package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/holdfast-backup/holdfast/model"
)

// TestAddingAKindSection holds "Adding a run kind" to the tree: every file it names exists, and
// a file named per kind (`spawn/kind_<kind>.go`) exists for each of model.Kinds(), so the
// section lists what a new kind touches as the code has it.
func TestAddingAKindSection(t *testing.T) {
	text, err := os.ReadFile("ARCHITECTURE.md")
	if err != nil {
		t.Fatal(err)
	}
	start := strings.Index(string(text), `<a id="kinds"></a>`)
	if start < 0 {
		t.Fatal(`ARCHITECTURE.md has no section <a id="kinds"></a> (Adding a run kind)`)
	}
	section := string(text[start:])
	if end := strings.Index(section[1:], "<a id="); end >= 0 {
		section = section[:end+1]
	}
	file := regexp.MustCompile(`^[a-z]+/[a-z0-9_<>]+\.(go|sql)$`)
	perKind := 0
	for _, m := range backticked.FindAllStringSubmatch(section, -1) {
		path := m[1]
		if !file.MatchString(path) || strings.Contains(path, "000NN") {
			continue
		}
		paths := []string{path}
		if strings.Contains(path, "<kind>") {
			perKind++
			paths = nil
			for _, k := range model.Kinds() {
				paths = append(paths, strings.ReplaceAll(path, "<kind>", string(k)))
			}
		}
		for _, p := range paths {
			if _, err := os.Stat(filepath.Join("..", p)); err != nil {
				t.Errorf("Adding a run kind names %s (as `%s`): %v", p, path, err)
			}
		}
	}
	if perKind < 2 {
		t.Errorf("Adding a run kind names %d files per kind (`<dir>/kind_<kind>.go`), want spawn's and reconcile's", perKind)
	}
}
