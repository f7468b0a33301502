package queue

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/vigil-dev/vigil/health"
)

// JobKeyTTL is how long a task's crash counter and last progress are kept.
const JobKeyTTL = 7 * 24 * time.Hour

// job is one run of a task by the middleware, reachable from the handler's
// context.
type job struct {
	w        *worker
	queue    string
	id       string
	typ      string
	start    time.Time
	crashes  int
	retried  int
	maxRetry int
	// shortCircuit: done without running (its declared outputs existed).
	shortCircuit bool
	run          *handlerRun // this run's handler (handback.go)
	stuck        bool        // its handler did not return once its context ended (stuckGrace)

	mu       sync.Mutex // serializes progress reports, guards the fields below
	thr      throttle
	seen     bool // a progress value was offered
	finished bool // the outcome is written: later reports are dropped
	scratch  string
}

type jobKey struct{}

func jobFrom(ctx context.Context) *job {
	j, _ := ctx.Value(jobKey{}).(*job)
	return j
}

// Progress reports the running task's progress in percent (clamped to
// 0–100). Reports are throttled (docs/design.md §6): one is written, as a
// progress event and as the task's last progress, only when the value moved
// by a point or more, or moved and 500 ms passed since the last report, or
// reached 100. The last value offered is kept in the process either way
// (LastProgress). Reports are written in the background, in order with the
// task's other events (a Redis error is logged; the task goes on). It
// returns ErrNotInTask outside a task run by RunWorker.
func Progress(ctx context.Context, pct float64) error {
	j := jobFrom(ctx)
	if j == nil {
		return ErrNotInTask
	}
	pct, ok := clampPct(pct)
	if !ok {
		return errors.New("progress: NaN")
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.finished {
		return nil // a handler that outlived its task
	}
	j.seen = true
	now := j.w.clock.Now()
	if !j.thr.offer(pct, now) {
		return nil
	}
	return j.w.reportProgress(ctx, j, pct, now)
}

// reportProgress queues one progress report: the task's last progress and
// its event, sent by the batcher in order with the task's other events.
func (w *worker) reportProgress(_ context.Context, j *job, pct float64, now time.Time) error {
	key := w.store.Keys().JobProgress(j.queue, j.id)
	ev := w.event(j, StateProgress)
	ev.Progress = &pct
	w.batch.add(writeReq{what: "progress", task: j.id, fill: func(ctx context.Context, pipe redis.Pipeliner) {
		pipe.Set(ctx, key, strconv.FormatFloat(pct, 'f', -1, 64), JobKeyTTL)
		jobEvents(ctx, w.store, pipe, now, ev)
	}})
	return nil
}

// MaxStage bounds a stage's name (bytes).
const MaxStage = 64

// Stage reports that the running task reached a named milestone, e.g.
// "source:ready" or "uploaded": a stage event, in order with the task's
// other events (created → processing → stages and progress → done |
// error), and the task's last stage, kept as its last progress is. A name
// is 1 to MaxStage bytes of a-z, 0-9 and ":._-". It returns ErrNotInTask
// outside a task run by RunWorker.
func Stage(ctx context.Context, name string) error {
	j := jobFrom(ctx)
	if j == nil {
		return ErrNotInTask
	}
	if !validStage(name) {
		return fmt.Errorf("stage %q: want 1 to %d bytes of a-z, 0-9 and \":._-\"", name, MaxStage)
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.finished {
		return nil // a handler that outlived its task
	}
	now := j.w.clock.Now()
	key := j.w.store.Keys().JobStage(j.queue, j.id)
	ev := j.w.event(j, StateStage)
	ev.Stage = name
	j.w.batch.add(writeReq{what: "stage", task: j.id, fill: func(ctx context.Context, pipe redis.Pipeliner) {
		pipe.Set(ctx, key, name, JobKeyTTL)
		jobEvents(ctx, j.w.store, pipe, now, ev)
	}})
	return nil
}

func validStage(s string) bool {
	if s == "" || len(s) > MaxStage {
		return false
	}
	for i := range len(s) {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == ':' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// LastProgress returns the last progress the running task offered, and
// whether it offered any.
func LastProgress(ctx context.Context) (float64, bool) {
	j := jobFrom(ctx)
	if j == nil {
		return 0, false
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.thr.last, j.seen
}

// Crashes returns how many workers died while running this task before
// (0 on a first run). A handler may use it to act differently on a task
// that keeps crashing its worker.
func Crashes(ctx context.Context) int {
	if j := jobFrom(ctx); j != nil {
		return j.crashes
	}
	return 0
}

// ScratchDir returns a directory of the running task's own, created on the
// first call. When the task succeeds it is removed (unless the pool keeps
// scratch on success); when it fails it is kept, and its size logged, for
// inspection.
func ScratchDir(ctx context.Context) (string, error) {
	j := jobFrom(ctx)
	if j == nil {
		return "", ErrNotInTask
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.scratch != "" {
		return j.scratch, nil
	}
	dir := filepath.Join(j.w.scratchRoot, j.queue, safeName(j.id)+"-"+strconv.FormatInt(j.start.UnixMilli(), 10))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("scratch dir for task %s: %w", j.id, err)
	}
	j.scratch = dir
	return dir, nil
}

// safeName keeps a task id usable as a file name.
func safeName(s string) string {
	b := []byte(s)
	for i, c := range b {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.'
		if !ok {
			b[i] = '_'
		}
	}
	if len(b) > 100 {
		b = b[:100]
	}
	return string(b)
}

// ReadProgress returns the last progress reported by task id of queue q
// (for the admin API), and whether there is one.
func ReadProgress(ctx context.Context, store *health.Store, q, id string) (float64, bool, error) {
	v, err := store.Client().Get(ctx, store.Keys().JobProgress(q, id)).Result()
	if errors.Is(err, redis.Nil) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("read progress of %s/%s: %w", q, id, err)
	}
	pct, err := strconv.ParseFloat(v, 64)
	if err != nil {
		return 0, false, fmt.Errorf("progress of %s/%s: %q is not a number", q, id, v)
	}
	return pct, true, nil
}

// ReadStage returns the last stage task id of queue q reported (Stage),
// and whether it reported one (in the last JobKeyTTL).
func ReadStage(ctx context.Context, store *health.Store, q, id string) (string, bool, error) {
	v, err := store.Client().Get(ctx, store.Keys().JobStage(q, id)).Result()
	if errors.Is(err, redis.Nil) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("read stage of %s/%s: %w", q, id, err)
	}
	return v, true, nil
}
