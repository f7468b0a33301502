package queue

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/vigil-dev/vigil/health"
)

// Recovering tells the supervisor that the running task's worker begins a
// known long operation (a model load, a cache warm-up) for up to d: its
// record says recovering, with reason, and its heartbeat key lives until
// the window ends (d clamped to the pool's heartbeat.recover_min and
// recover_max, 5 s to 120 s by default; never shorter than the TTL). No
// ordinary beat is sent meanwhile, until the task ends or one interval
// before the window does; the next one makes the worker healthy again. A
// process that cannot beat by the window's end is judged hung, a counted
// crash. It returns ErrNotInTask outside a task run by RunWorker.
func Recovering(ctx context.Context, d time.Duration, reason string) error {
	j := jobFrom(ctx)
	if j == nil {
		return ErrNotInTask
	}
	return j.w.recovering.open(ctx, j, d, reason)
}

// recoveryWindows tracks the tasks that opened a recovering window: the
// heartbeat's ordinary beats resume once none runs any more.
type recoveryWindows struct {
	hb   *health.Heartbeater
	mu   sync.Mutex
	jobs map[*job]struct{}
}

func (r *recoveryWindows) open(ctx context.Context, j *job, d time.Duration, reason string) error {
	if r.hb == nil {
		return fmt.Errorf("recovering: the worker has no heartbeat yet")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, err := r.hb.Recover(ctx, d, reason); err != nil {
		return fmt.Errorf("recovering: %w", err)
	}
	if r.jobs == nil {
		r.jobs = map[*job]struct{}{}
	}
	r.jobs[j] = struct{}{}
	return nil
}

// done is called as j finishes: the last window's task ending lets the
// ordinary beats resume.
func (r *recoveryWindows) done(j *job) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.jobs[j]; !ok {
		return
	}
	delete(r.jobs, j)
	if len(r.jobs) == 0 {
		r.hb.EndRecovery()
	}
}
