package engine

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// OpDrill is a restore drill's operation (Restic.Operation): a sample of a snapshot's files
// restored into a scratch directory and read back against the repository.
const OpDrill = "drill"

// MaxDrillFiles bounds a drill's sample: each file is one include pattern on restic's command line.
const MaxDrillFiles = 1000

// Drill is the payload of a drill's summary event: the snapshot it sampled, the files it
// restored and verified (paths in the snapshot), and their bytes.
type Drill struct {
	SnapshotID string   `json:"snapshot_id"`
	Files      []string `json:"drill_files"`
	Bytes      int64    `json:"drill_bytes"`
	// Candidates is how many regular files the snapshot has, the sample's population.
	Candidates int64 `json:"drill_candidates"`
}

// drillMessage is the line `holdfast drill` prints for its summary.
type drillMessage struct {
	MessageType string `json:"message_type"` // "drill"
	Drill
}

// DrillConfig is one drill, run inside its unit as the job's user.
type DrillConfig struct {
	Restic  []string // restic and its global options (the repository, its password, the cache)
	Tag     string   // the latest snapshot with this tag is sampled (the job's)
	Files   int      // how many files to restore; 1..MaxDrillFiles
	Scratch string   // a directory of the unit's to restore into; made, and removed after
	Rand    *rand.Rand
	Stdout  io.Writer // gets the summary line
	Stderr  io.Writer // gets restic's standard error
}

// RunDrill samples cfg.Files regular files of the latest snapshot tagged cfg.Tag, restores them
// with restic restore --verify into cfg.Scratch, checks that each came back with its size, prints
// the summary line and removes the scratch directory. It returns the exit status to exit with:
// restic's own when restic failed (its errors are on Stderr), 1 when a file did not come back.
func RunDrill(ctx context.Context, cfg DrillConfig) int {
	if cfg.Files < 1 || cfg.Files > MaxDrillFiles {
		fmt.Fprintf(cfg.Stderr, "Fatal: a drill restores 1 to %d files, not %d\n", MaxDrillFiles, cfg.Files)
		return 1
	}
	lsArgv := append(cfg.Restic[1:len(cfg.Restic):len(cfg.Restic)], "ls", "--json", "--tag", cfg.Tag, "latest")
	ls := interruptible(exec.CommandContext(ctx, cfg.Restic[0], lsArgv...))
	ls.Stderr = cfg.Stderr
	out, err := ls.StdoutPipe()
	if err != nil {
		fmt.Fprintf(cfg.Stderr, "Fatal: restic ls: %v\n", err)
		return 1
	}
	if err := ls.Start(); err != nil {
		fmt.Fprintf(cfg.Stderr, "Fatal: restic ls: %v\n", err)
		return 1
	}
	sample, readErr := SampleFiles(out, cfg.Files, cfg.Rand)
	_, _ = io.Copy(io.Discard, out)
	if err := ls.Wait(); err != nil {
		return exitOf(ctx, cfg.Stderr, "restic ls", err)
	}
	if readErr != nil {
		fmt.Fprintf(cfg.Stderr, "Fatal: restic ls: %v\n", readErr)
		return 1
	}
	if len(sample.Files) == 0 {
		fmt.Fprintf(cfg.Stderr, "Fatal: snapshot %.8s has no regular file to restore\n", sample.SnapshotID)
		return 1
	}
	if ctx.Err() != nil {
		return 130 // stopped between the listing and the restore
	}
	if err := os.Mkdir(cfg.Scratch, 0o700); err != nil {
		fmt.Fprintf(cfg.Stderr, "Fatal: scratch directory: %v\n", err)
		return 1
	}
	defer os.RemoveAll(cfg.Scratch)
	argv := append(cfg.Restic[:len(cfg.Restic):len(cfg.Restic)], "restore", "--target", cfg.Scratch, "--verify")
	for _, f := range sample.Files {
		argv = append(argv, "--include", GlobEscape(f.Path))
	}
	restore := interruptible(exec.CommandContext(ctx, argv[0], append(argv[1:], sample.SnapshotID)...))
	restore.Stderr, restore.Stdout = cfg.Stderr, io.Discard
	if err := restore.Run(); err != nil {
		return exitOf(ctx, cfg.Stderr, "restic restore", err)
	}
	d := Drill{SnapshotID: sample.SnapshotID, Candidates: sample.Candidates}
	missing := 0
	for _, f := range sample.Files {
		info, err := os.Lstat(filepath.Join(cfg.Scratch, f.Path))
		switch {
		case err != nil:
			fmt.Fprintf(cfg.Stderr, "%s%s: not restored: %v\n", restoreError, f.Path, err)
			missing++
			continue
		case !info.Mode().IsRegular() || info.Size() != f.Size:
			fmt.Fprintf(cfg.Stderr, "%s%s: restored as %v of %d bytes, want a regular file of %d\n", restoreError, f.Path, info.Mode().Type(), info.Size(), f.Size)
			missing++
			continue
		}
		d.Files = append(d.Files, f.Path)
		d.Bytes += f.Size
	}
	b, _ := json.Marshal(drillMessage{MessageType: "drill", Drill: d})
	fmt.Fprintf(cfg.Stdout, "%s\n", b)
	if missing > 0 {
		fmt.Fprintf(cfg.Stderr, "Fatal: There were %d errors\n", missing)
		return 1
	}
	return 0
}

// interruptible makes the end of the drill's context (the unit's stop) reach restic as SIGINT,
// on which restic removes its lock and exits 130, rather than as SIGKILL.
func interruptible(cmd *exec.Cmd) *exec.Cmd {
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = time.Minute
	return cmd
}

// exitOf is the status a drill exits with after a command of it failed: restic's own, or 130
// when the unit's stop came before restic could say (as restic says on SIGINT).
func exitOf(ctx context.Context, stderr io.Writer, what string, err error) int {
	var exit *exec.ExitError
	if errors.As(err, &exit) && exit.ExitCode() > 0 {
		return exit.ExitCode()
	}
	if ctx.Err() != nil {
		return 130
	}
	fmt.Fprintf(stderr, "Fatal: %s: %v\n", what, err)
	return 1
}

// SampledFile is a regular file of a snapshot a drill restores.
type SampledFile struct {
	Path string
	Size int64
}

// Sample is what SampleFiles chose.
type Sample struct {
	SnapshotID string
	Files      []SampledFile
	Candidates int64 // the snapshot's regular files
}

// SampleFiles reads `restic ls --json` (the snapshot line, then one line per node) and chooses
// up to n of its regular files uniformly at random (reservoir sampling: memory for n, whatever
// the snapshot's size). A listing without its snapshot line is refused.
func SampleFiles(r io.Reader, n int, rng *rand.Rand) (Sample, error) {
	var s Sample
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var node struct {
			StructType string `json:"struct_type"`
			ID         string `json:"id"`
			Type       string `json:"type"`
			Path       string `json:"path"`
			Size       int64  `json:"size"`
		}
		if err := json.Unmarshal(line, &node); err != nil {
			return Sample{}, fmt.Errorf("a line of the listing is not JSON: %.80q", line)
		}
		switch {
		case node.StructType == "snapshot":
			if s.SnapshotID != "" || !fullID().MatchString(node.ID) {
				return Sample{}, fmt.Errorf("the listing names a snapshot %.80q where one full id was expected", node.ID)
			}
			s.SnapshotID = node.ID
		case node.StructType == "node" && node.Type == "file":
			if s.SnapshotID == "" {
				return Sample{}, errors.New("the listing gives files before its snapshot")
			}
			if !strings.HasPrefix(node.Path, "/") || strings.ContainsAny(node.Path, "\x00\n") || node.Size < 0 {
				continue // not a path restic restores by pattern
			}
			s.Candidates++
			f := SampledFile{node.Path, node.Size}
			if len(s.Files) < n {
				s.Files = append(s.Files, f)
			} else if i := rng.Int64N(s.Candidates); i < int64(n) {
				s.Files[i] = f
			}
		}
	}
	if err := sc.Err(); err != nil {
		return Sample{}, err
	}
	if s.SnapshotID == "" {
		return Sample{}, errors.New("the listing names no snapshot")
	}
	return s, nil
}

// GlobEscape makes a path a restic pattern (--include, find) that matches only itself.
func GlobEscape(p string) string {
	var b strings.Builder
	for _, r := range p {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}
