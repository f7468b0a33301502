package queue_test

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	"github.com/vigil-dev/vigil/queue"
)

// outputBytes is what testjobworker's publish handlers write.
func outputBytes(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i % 251)
	}
	return b
}

// A real SIGKILL of the worker process at every step of a publish's
// commit (pending manifest written; file moved; manifest moved, directory
// not yet synced): the final key never holds a partial file, and the
// retry either redoes the work (the file had not moved: no output) or is
// done without running (the output is whole: its pending manifest is
// completed).
func TestSIGKILLAtEveryCommitStep(t *testing.T) {
	for step, shortCircuit := range map[string]bool{"commit:1": false, "commit:2": true, "commit:3": true} {
		t.Run(step, func(t *testing.T) {
			e := newQEnv(t)
			results := t.TempDir()
			s := e.supervise(pool{workers: 1, resultsDir: results, env: map[string]string{
				"TESTJOB_CRASH_AT": step, "TESTJOB_CRASH_MARKER": filepath.Join(t.TempDir(), "crashed")}})
			w := e.watch()
			s.waitHealthy(w)
			const n = 1 << 20
			id := e.enqueue(e.client(), "publish-at", strconv.Itoa(n))
			w.untilJob(id, queue.StateDone)
			evs := e.events(queue.JobTopic(e.q, id))
			last := evs[len(evs)-1].job
			runs := s.counts("runs")[id]
			if !slices.Contains(e.states(id), queue.StateRequeuedStale) {
				t.Fatalf("events %v: the worker did not die at %s", e.states(id), step)
			}
			if last.ShortCircuit != shortCircuit || (shortCircuit && runs != 1) || (!shortCircuit && runs != 2) {
				t.Errorf("at %s: short_circuit %v, handler runs %d; want short_circuit %v", step, last.ShortCircuit, runs, shortCircuit)
			}
			got, err := os.ReadFile(filepath.Join(queue.FSStore{Dir: results}.TaskDir(id), "out.bin"))
			if err != nil || !bytes.Equal(got, outputBytes(n)) {
				t.Fatalf("output at its key: %d bytes, err %v; want %d whole", len(got), err, n)
			}
		})
	}
}

// runPublish runs one task of testjobworker's type typ (n bytes) on a
// supervised worker until it is done.
func runPublish(t *testing.T, typ string, n int) (e *qenv, s *supervised, results, id string) {
	t.Helper()
	e = newQEnv(t)
	results = t.TempDir()
	s = e.supervise(pool{workers: 1, resultsDir: results})
	w := e.watch()
	s.waitHealthy(w)
	id = e.enqueue(e.client(), typ, strconv.Itoa(n))
	w.untilJob(id, queue.StateDone)
	return e, s, results, id
}

// A worker dies after publishing the task's declared output, before its
// outcome is written: the task comes back at once, and its next run is
// done without running the handler again (short_circuit), the output
// whole at its key.
func TestDeclaredOutputShortCircuitsTheRetry(t *testing.T) {
	const n = 3 << 20
	e, s, results, id := runPublish(t, "publish", n)
	if runs := s.counts("runs")[id]; runs != 1 {
		t.Errorf("the handler ran %d times, want once", runs)
	}
	evs := e.events(queue.JobTopic(e.q, id))
	last := evs[len(evs)-1].job
	if last.State != queue.StateDone || !last.ShortCircuit {
		t.Errorf("last event %+v: want done with short_circuit", last)
	}
	if got := e.states(id); !slices.Contains(got, queue.StateRequeuedStale) {
		t.Errorf("events %v: the crash did not requeue the task", got)
	}
	got, err := os.ReadFile(filepath.Join(queue.FSStore{Dir: results}.TaskDir(id), "out.bin"))
	if err != nil || !bytes.Equal(got, outputBytes(n)) {
		t.Fatalf("output at its key: %d bytes, err %v; want %d whole", len(got), err, n)
	}
}

// A worker SIGKILLed halfway through writing an output leaves nothing at
// the final key; the task's next run writes it whole and completes.
func TestKillDuringPublishLeavesNoPartialOutput(t *testing.T) {
	const n = 3 << 20
	_, s, results, id := runPublish(t, "publish-kill", n)
	if runs, done := s.counts("runs")[id], s.counts("completions")[id]; runs != 2 || done != 1 {
		t.Errorf("runs %d, completions %d; want 2 and 1", runs, done)
	}
	dir := queue.FSStore{Dir: results}.TaskDir(id)
	got, err := os.ReadFile(filepath.Join(dir, "out.bin"))
	if err != nil || !bytes.Equal(got, outputBytes(n)) {
		t.Fatalf("output at its key: %d bytes, err %v; want %d whole", len(got), err, n)
	}
	entries, _ := os.ReadDir(dir)
	for _, de := range entries {
		if name := de.Name(); name != "out.bin" && name != ".out.bin.manifest" && name != ".lock" {
			t.Errorf("left in the task's output directory: %s", name)
		}
	}
}
