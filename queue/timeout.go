package queue

import (
	"context"
	"time"
)

// AsynqDefaultTimeout is the Timeout asynq's Client gives a task enqueued
// with neither Timeout nor Deadline (asynq v0.26.0, client.go).
const AsynqDefaultTimeout = 30 * time.Minute

// implicitSlack is how far below AsynqDefaultTimeout a task's remaining
// time may be, when its handler starts, for it to be read as asynq's
// implicit default: the time asynq took between computing the deadline
// and calling the handler.
const implicitSlack = 5 * time.Second

// Where an attempt's timeout comes from (TimeoutOf).
const (
	TimeoutFromTask         = "task"             // the task's own Timeout
	TimeoutFromDeadline     = "deadline"         // the task's own Deadline only
	TimeoutFromPool         = "pool"             // the pool's task_timeout
	TimeoutFromAsynqDefault = "asynq_default"    // asynq's implicit 30 min
	TimeoutFromMax          = "max_task_timeout" // the pool's cap
)

// TimeoutOf decides an attempt's timeout as asynq means it (docs/design.md §6):
// the task's own Timeout or Deadline wins; the pool's task_timeout
// applies to a task that has none. asynq gives a task enqueued with
// neither a Timeout of 30 minutes, and a task enqueued with an explicit 30
// minutes looks the same, so a Timeout of exactly 30 minutes with no
// Deadline counts as none: the pool's task_timeout applies if it is
// shorter (asynq's own deadline still ends the attempt at 30 minutes, so
// a longer pool value cannot lengthen it: enqueue through Vigil, which
// sets the pool's value explicitly, or give the task a Timeout). A
// positive max caps all of it. own is the task's Timeout (0: none);
// hasDeadline whether it has a Deadline. d = 0 means no timeout but the
// deadline.
func TimeoutOf(own time.Duration, hasDeadline bool, pool, max time.Duration) (d time.Duration, from string) {
	switch {
	case own == AsynqDefaultTimeout && !hasDeadline && pool > 0 && pool < own:
		d, from = pool, TimeoutFromPool
	case own == AsynqDefaultTimeout && !hasDeadline:
		d, from = own, TimeoutFromAsynqDefault
	case own > 0:
		d, from = own, TimeoutFromTask
	default:
		from = TimeoutFromDeadline
	}
	if max > 0 && (d == 0 || d > max) {
		d, from = max, TimeoutFromMax
	}
	return d, from
}

// attemptTimeout is the timeout the middleware adds to an attempt's
// context (0: none, asynq's deadline is the task's own). The task's
// options reach the handler only as the context's deadline, which asynq
// computed a moment ago on the real clock: a remaining time within
// implicitSlack under 30 minutes is asynq's implicit default.
func (w *worker) attemptTimeout(ctx context.Context) (time.Duration, string) {
	own, hasDeadline := time.Duration(0), true
	if dl, ok := ctx.Deadline(); ok {
		if r := time.Until(dl); r > AsynqDefaultTimeout-implicitSlack && r <= AsynqDefaultTimeout {
			own, hasDeadline = AsynqDefaultTimeout, false
		}
	}
	d, from := TimeoutOf(own, hasDeadline, w.env.TaskTimeout, w.env.MaxTaskTimeout)
	if from == TimeoutFromAsynqDefault {
		return 0, from // asynq's deadline says the same
	}
	return d, from
}
