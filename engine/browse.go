package engine

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"strings"
	"time"
)

// Node is one entry of a snapshot's tree as restic lists it (`ls`, `find`). Its names are
// untrusted text: they come from the repository, which the job's user can write.
type Node struct {
	Path string `json:"path"`
	// Type is restic's: file, dir, symlink, dev, chardev, fifo, socket (or irregular, from 0.17).
	Type string `json:"type"`
	// Size is a file's size; nil for what is not a file.
	Size    *uint64     `json:"size,omitempty"`
	Mode    os.FileMode `json:"mode"`
	ModTime time.Time   `json:"mtime"`
	UID     uint32      `json:"uid"`
	GID     uint32      `json:"gid"`
}

// Found is a node a search found, in the snapshot that holds it (restic's full id).
type Found struct {
	Snapshot string
	Node     Node
}

// Browsing's bounds: the longest line of a listing restic may print (one node: a path of the
// kernel's 4 KiB at most, JSON-escaped six-fold at worst, and its figures), and how many
// matches of one snapshot a search holds before it says the pattern matched too much (restic
// names the snapshot only after its matches).
const (
	maxNodeLine         = 64 << 10
	MaxFoundPerSnapshot = 10000
	maxFoundBytes       = 16 << 20 // of the paths of one snapshot's matches
)

// ErrTooManyFound is a search whose pattern matched more than MaxFoundPerSnapshot entries of
// one snapshot: narrow the pattern.
var ErrTooManyFound = fmt.Errorf("the pattern matches more than %d entries of one snapshot: narrow it (a path, or a name with fewer wildcards)", MaxFoundPerSnapshot)

// LsArgv lists snapshot's entries under dir (an absolute path in the snapshot; "/" is its top):
// dir's direct entries, or with recursive everything below it. restic 0.14 to 0.19 list the
// same way, one JSON object a line, the snapshot's first.
func (r Restic) LsArgv(j Job, snapshot, dir string, recursive bool) []string {
	argv := append(r.global(j), "--no-lock", "ls", "--json")
	if recursive {
		argv = append(argv, "--recursive")
	}
	return append(argv, "--", snapshot, dir)
}

// FindArgv searches snapshots (full ids; none is every snapshot of the job) for entries whose
// name, or path when the pattern holds a slash, matches pattern.
func (r Restic) FindArgv(j Job, pattern string, snapshots []string) []string {
	argv := append(r.global(j), "--no-lock", "find", "--json")
	if len(snapshots) == 0 {
		argv = append(argv, "--tag", JobTag(j.Name))
	}
	for _, id := range snapshots {
		argv = append(argv, "--snapshot", id)
	}
	return append(argv, "--", pattern)
}

// Ls lists snapshot's entries under dir (LsArgv), handing each to each as restic prints it:
// nothing is held but the entry at hand. An error from each stops the listing.
func (r Restic) Ls(ctx context.Context, j Job, snapshot, dir string, recursive bool, each func(Node) error) error {
	err := r.stream(ctx, r.LsArgv(j, snapshot, dir, recursive), func(out io.Reader) error { return ParseLs(out, each) })
	if err != nil {
		return fmt.Errorf("restic ls %.8s %s: %w", snapshot, dir, err)
	}
	return nil
}

// Find searches the job's snapshots for pattern (FindArgv), handing each entry found to each
// with its snapshot, a snapshot's entries together.
func (r Restic) Find(ctx context.Context, j Job, pattern string, snapshots []string, each func(Found) error) error {
	err := r.stream(ctx, r.FindArgv(j, pattern, snapshots), func(out io.Reader) error { return ParseFind(out, each) })
	if err != nil {
		return fmt.Errorf("restic find %s: %w", pattern, err)
	}
	return nil
}

// stream runs a query and hands its standard output to consume: through r.Stream (the job's
// unit) when set, else as this process.
func (r Restic) stream(ctx context.Context, argv []string, consume func(io.Reader) error) error {
	if r.Stream != nil {
		return r.Stream(ctx, argv, consume)
	}
	return runHere(ctx, argv, consume)
}

// runHere runs a restic query as this process, without a shell, handing its stdout to consume
// (which, failing, kills it); a failure carries the first line restic wrote to stderr, and an
// answer that skipped a snapshot is one (QueryPartial).
func runHere(ctx context.Context, argv []string, consume func(io.Reader) error) error {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	consumed := consume(out)
	if consumed != nil {
		_ = cmd.Process.Kill()
	} else {
		_, consumed = io.Copy(io.Discard, out)
	}
	if err := cmd.Wait(); err != nil && consumed == nil {
		return fmt.Errorf("%w: %s", err, firstLine(strings.TrimSpace(stderr.String())))
	}
	if consumed != nil {
		return consumed
	}
	return QueryPartial(stderr.Bytes())
}

// lsLine is one line of `restic ls --json`: the snapshot, then its nodes. 0.17 added
// message_type beside struct_type; both are read.
type lsLine struct {
	StructType  string `json:"struct_type"`
	MessageType string `json:"message_type"`
	Node
}

// ParseLs reads `restic ls --json` and hands each node to each. A line longer than any node's
// could be, or one that is not JSON, fails the listing: the output is not restic's.
func ParseLs(r io.Reader, each func(Node) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxNodeLine)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var l lsLine
		if err := json.Unmarshal(line, &l); err != nil {
			return fmt.Errorf("read restic's listing: %w", err)
		}
		if l.StructType != "node" && l.MessageType != "node" {
			continue // the snapshot listed, before its nodes
		}
		if err := checkNode(l.Node); err != nil {
			return err
		}
		if err := each(l.Node); err != nil {
			return err
		}
	}
	if errors.Is(sc.Err(), bufio.ErrTooLong) {
		return fmt.Errorf("read restic's listing: a line of over %d bytes, which no entry of a snapshot has", maxNodeLine)
	}
	return sc.Err()
}

// ParseFind reads `restic find --json`: one JSON array of each snapshot's matches, where the
// snapshot's id follows its matches. A snapshot's matches are held until its id is read, at most
// MaxFoundPerSnapshot of them, each no longer than a listing's line.
func ParseFind(r io.Reader, each func(Found) error) error {
	br := &boundedReader{r: r}
	dec := json.NewDecoder(br)
	br.dec = dec
	tok, err := dec.Token()
	if err == io.EOF {
		return nil // nothing found: restic 0.14 prints nothing at all
	}
	if err != nil || tok != json.Delim('[') {
		return fmt.Errorf("read restic's search: want a JSON array, got %v (%v)", tok, err)
	}
	for dec.More() {
		var matches []Node
		var snapshot string
		held := 0
		if err := expectDelim(dec, '{'); err != nil {
			return err
		}
		for dec.More() {
			key, err := dec.Token()
			if err != nil {
				return fmt.Errorf("read restic's search: %w", err)
			}
			switch key {
			case "matches":
				if err := expectDelim(dec, '['); err != nil {
					return err
				}
				for dec.More() {
					if len(matches) == MaxFoundPerSnapshot || held > maxFoundBytes {
						return ErrTooManyFound
					}
					var n Node
					if err := dec.Decode(&n); err != nil {
						return fmt.Errorf("read restic's search: %w", err)
					}
					if err := checkNode(n); err != nil {
						return err
					}
					matches = append(matches, n)
					held += len(n.Path)
				}
				if err := expectDelim(dec, ']'); err != nil {
					return err
				}
			case "snapshot":
				if err := dec.Decode(&snapshot); err != nil {
					return fmt.Errorf("read restic's search: %w", err)
				}
			default:
				var skip json.RawMessage // hits, and what a later restic adds
				if err := dec.Decode(&skip); err != nil {
					return fmt.Errorf("read restic's search: %w", err)
				}
			}
		}
		if err := expectDelim(dec, '}'); err != nil {
			return err
		}
		if !fullID().MatchString(snapshot) {
			return fmt.Errorf("read restic's search: matches of snapshot %q, which is not a snapshot's id", clip(snapshot))
		}
		for _, n := range matches {
			if err := each(Found{Snapshot: snapshot, Node: n}); err != nil {
				return err
			}
		}
	}
	return expectDelim(dec, ']')
}

func expectDelim(dec *json.Decoder, want json.Delim) error {
	tok, err := dec.Token()
	if err != nil {
		return fmt.Errorf("read restic's search: %w", err)
	}
	if tok != want {
		return fmt.Errorf("read restic's search: want %v, got %v", want, tok)
	}
	return nil
}

// nodeTypes are the types of restic's nodes.
var nodeTypes = map[string]bool{"file": true, "dir": true, "symlink": true, "dev": true, "chardev": true, "fifo": true, "socket": true,
	"irregular": true} // restic 0.17 and later: a file it could not read as any of the others

// checkNode refuses a node that no snapshot's tree could hold: restic's paths are absolute and
// clean (no "..", which a caller joining it to a directory would follow out of it) and hold no
// NUL, and its types are few.
func checkNode(n Node) error {
	if !strings.HasPrefix(n.Path, "/") || strings.ContainsRune(n.Path, 0) || path.Clean(n.Path) != n.Path {
		return fmt.Errorf("read restic's listing: an entry whose path %q is not a clean absolute path", clip(n.Path))
	}
	if !nodeTypes[n.Type] {
		return fmt.Errorf("read restic's listing: an entry of type %q, which restic has none of", clip(n.Type))
	}
	return nil
}

// boundedReader fails a read once the decoder holds more than maxNodeLine bytes it has not
// consumed: it reads more only to finish a token or a value, so none (a node, a snapshot's id)
// can grow without end.
type boundedReader struct {
	r    io.Reader
	dec  *json.Decoder
	read int64
}

func (b *boundedReader) Read(p []byte) (int, error) {
	if b.read-b.dec.InputOffset() > maxNodeLine {
		return 0, fmt.Errorf("read restic's search: a value of over %d bytes, which no entry of a snapshot has", maxNodeLine)
	}
	n, err := b.r.Read(p)
	b.read += int64(n)
	return n, err
}
