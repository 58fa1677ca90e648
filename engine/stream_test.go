package engine

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
)

// snapshotCount is how many snapshots job's repository holds.
func snapshotCount(t *testing.T, job Job) int {
	t.Helper()
	argv := append(Restic{}.global(job), "snapshots", "--json")
	out, err := exec.Command(argv[0], argv[1:]...).Output()
	if err != nil {
		t.Fatalf("restic snapshots: %v", err)
	}
	snaps, err := ParseSnapshots(out)
	if err != nil {
		t.Fatal(err)
	}
	return len(snaps)
}

// A producer's output is backed up as one file, whole; a producer that fails, is killed or
// cannot start fails the attempt with restic stopped before the stream ended: no snapshot.
func TestResticStream(t *testing.T) {
	t.Parallel()
	job := newRepo(t, t.TempDir())
	job.StdinFilename = "shop.dump"
	backup := func(t *testing.T, ctx context.Context, producer ...string) (int, *recorder, string) {
		t.Helper()
		var rec recorder
		var stderr bytes.Buffer
		status, err := Exec(ctx, ExecConfig{Argv: Restic{}.BackupArgv(job, uuid.New()), Parser: Restic{}, Emit: rec.emit, Stderr: &stderr,
			Producer: &Producer{Argv: producer, Line: strings.Join(producer, " ")}})
		if err != nil {
			t.Fatalf("Exec: %v\n%s", err, stderr.Bytes())
		}
		if ctx.Err() == nil {
			checkExit(t, &rec, Exit{ExitStatus: status})
		}
		return status, &rec, stderr.String()
	}

	status, rec, stderr := backup(t, context.Background(), "/bin/sh", "-c", "head -c 3000000 /dev/zero; echo end")
	ev := rec.evidence(status)
	if out := (Restic{}).Classify(ev); status != 0 || out.Status != Succeeded || ev.Summary == nil {
		t.Fatalf("a whole stream: exit %d, %+v; stderr:\n%s", status, out, stderr)
	}
	argv := append(Restic{}.global(job), "dump", ev.Summary.SnapshotID, "/shop.dump")
	dumped, err := exec.Command(argv[0], argv[1:]...).Output()
	if err != nil || len(dumped) != 3000004 || !bytes.HasSuffix(dumped, []byte("end\n")) {
		t.Fatalf("restic dump /shop.dump: %d bytes, %v; want the producer's 3000004", len(dumped), err)
	}

	for _, tc := range []struct {
		name     string
		producer []string
		want     string
	}{
		{"exits 3 half way", []string{"/bin/sh", "-c", "head -c 2000000 /dev/zero; exit 3"}, "exited 3"},
		{"killed", []string{"/bin/sh", "-c", "head -c 100000 /dev/zero; kill -KILL $$"}, "was killed by SIGKILL"},
		{"cannot start", []string{filepath.Join(t.TempDir(), "no-such-dump")}, "could not start"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, rec, stderr := backup(t, context.Background(), tc.producer...)
			ev := rec.evidence(status)
			out := (Restic{}).Classify(ev)
			if status != 1 || ev.Summary != nil || out.Status != Failed || out.Class != Transient ||
				!strings.HasPrefix(out.Reason, StreamFailed+tc.producer[0]) || !strings.Contains(out.Reason, tc.want) {
				t.Fatalf("exit %d, summary %v, %+v; want failed naming the producer, %q; stderr:\n%s", status, ev.Summary, out, tc.want, stderr)
			}
		})
	}
	// A stop while the producer runs stops both: interrupted, as any stopped backup. It comes
	// once restic has read the producer's first 100 kB (more than a pipe holds): restic is past
	// its start then, with its SIGINT handler set, however loaded the machine.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	read := filepath.Join(t.TempDir(), "read")
	go func() {
		deadline := time.Now().Add(time.Minute)
		for time.Now().Before(deadline) {
			if _, err := os.Stat(read); err == nil {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		cancel()
	}()
	status, rec, stderr = backup(t, ctx, "/bin/sh", "-c", "head -c 100000 /dev/zero; touch "+read+"; exec sleep 1000")
	if out := (Restic{}).Classify(rec.evidence(status)); status != 130 || out.Status != Interrupted {
		t.Fatalf("stopped: exit %d, %+v; want 130, interrupted; stderr:\n%s", status, out, stderr)
	}
	// restic exits 130 itself, or dies of the SIGINT while it still reads its input.
	if evs := rec.of(TypeExit); len(evs) != 1 ||
		!eventIs(evs[0], TypeExit, Exit{ExitStatus: 130}) && !eventIs(evs[0], TypeExit, Exit{ExitStatus: 130, Signal: "SIGINT"}) {
		t.Fatalf("stopped: exit events %+v, want one of status 130", evs)
	}
	if n := snapshotCount(t, job); n != 1 {
		t.Fatalf("the repository holds %d snapshots, want only the whole stream's", n)
	}
}

// An engine that ends on its own while the producer still writes keeps its own exit: the
// producer, cut off, is no cause.
func TestStreamEngineEndsFirst(t *testing.T) {
	var rec recorder
	status, err := Exec(context.Background(), ExecConfig{Argv: []string{"/bin/sh", "-c", "head -c 10 >/dev/null; exit 2"}, Emit: rec.emit,
		Producer: &Producer{Argv: []string{"/bin/sh", "-c", "exec cat /dev/zero"}, Line: "cat /dev/zero"}})
	if err != nil || status != 2 {
		t.Fatalf("Exec = %d, %v; want the engine's 2", status, err)
	}
	if f := rec.of(TypeFatal); len(f) != 0 {
		t.Fatalf("fatal events %v; the engine's exit is the cause", f)
	}
}

// A producer that leaves a child behind holding its output does not hold up the end once the
// engine is gone: its process group is killed and the copy stops.
func TestStreamLeftBehindChild(t *testing.T) {
	done := make(chan int, 1)
	go func() {
		status, _ := Exec(context.Background(), ExecConfig{Argv: []string{"/bin/sh", "-c", "exit 2"},
			Producer: &Producer{Argv: []string{"/bin/sh", "-c", "sleep 1000 & sleep 1000"}, Line: "sleeps"}})
		done <- status
	}()
	select {
	case status := <-done:
		if status != 2 {
			t.Fatalf("Exec = %d, want the engine's 2", status)
		}
	case <-time.After(time.Minute):
		t.Fatal("Exec still waits for the producer's children a minute after the engine exited")
	}
}

// After a stop, a producer that exits 0 on it does not end the engine's input: the engine (one
// that ignores SIGINT, unlike restic) never reads the end of a stream cut short.
func TestStreamStopNeverEndsInput(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	var stdout lines
	stdout.ch = make(chan string, 4)
	_, err := Exec(ctx, ExecConfig{Argv: []string{"/bin/sh", "-c", `trap "" INT; timeout 3 cat >/dev/null; echo "cat=$?"`}, Stdout: &stdout,
		Producer:  &Producer{Argv: []string{"/bin/sh", "-c", `trap "exit 0" INT; while :; do sleep 0.1; done`}, Line: "loop"},
		StopGrace: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	stdout.await(t, "cat=124", "the engine's report")
}

// A producer that fails while the engine waits on its input and does not act on SIGINT (restic
// 0.18 and later wait for their input) ends the attempt after the grace, failed for the
// producer: the engine, read as restic (a StopGracer), is killed, its input never ended.
func TestStreamFailureKillsDeafEngine(t *testing.T) {
	var rec recorder
	done := make(chan int, 1)
	go func() {
		status, err := Exec(context.Background(), ExecConfig{
			Argv:      []string{"/bin/sh", "-c", `trap "" INT; cat >/dev/null; echo "the input ended" >&2; exit 0`},
			Parser:    Restic{},
			Emit:      rec.emit,
			Producer:  &Producer{Argv: []string{"/bin/sh", "-c", "echo part; exit 4"}, Line: "dump"},
			StopGrace: 200 * time.Millisecond,
		})
		if err != nil {
			t.Error(err)
		}
		done <- status
	}()
	select {
	case status := <-done:
		if status != 1 {
			t.Fatalf("Exec = %d, want 1", status)
		}
	case <-time.After(time.Minute):
		t.Fatal("the engine still runs a minute after its producer failed")
	}
	f := rec.of(TypeFatal)
	if len(f) != 1 || !strings.HasPrefix(f[0].Payload.(Fatal).Message, StreamFailed+"dump exited 4;") {
		t.Fatalf("fatal events %+v, want the producer's failure", f)
	}
	checkExit(t, &rec, Exit{ExitStatus: 1})
}
