package queue

import (
	"errors"
	"fmt"

	"github.com/hibiken/asynq"
)

// ErrNonRetryable marks a handler error that retrying cannot fix (bad
// input, INPUT_TOO_LARGE …): the task fails at once, archived with the code
// NON_RETRYABLE, whatever its MaxRetry. Wrap it:
//
//	return fmt.Errorf("decode payload: %w", queue.ErrNonRetryable)
//
// or use NonRetryable. asynq.SkipRetry has the same effect.
var ErrNonRetryable = errors.New("non-retryable")

// NonRetryable returns err marked with ErrNonRetryable (nil stays nil).
func NonRetryable(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%w (%w)", err, ErrNonRetryable)
}

// ErrNotInTask is returned by Progress and ScratchDir called outside a
// handler run by RunWorker.
var ErrNotInTask = errors.New("not inside a task run by queue.RunWorker")

// ErrTooManyFailures is what RunWorker returns, after a graceful shutdown,
// when Env.MaxConsecutiveFailures tasks in a row failed: the caller exits
// non-zero, and the supervisor starts a fresh process (a counted crash).
var ErrTooManyFailures = errors.New("too many consecutive task failures")

// ErrStuckHandler is what RunWorker returns, after a graceful shutdown,
// when a handler did not return once its context ended (its task's
// deadline, a cancel): the caller exits with a non-zero code, so that the
// supervisor counts a crash and requeues the task, a crash counted
// against it (the worker's crash is the task's: a job that keeps hanging
// ends toxic).
var ErrStuckHandler = errors.New("a task's handler did not return once its context ended")

// Errors of Enqueue; nothing is enqueued when one is returned.
var (
	ErrPayloadTooLarge = errors.New("payload too large")
	ErrNegativeDelay   = errors.New("negative delay")
	ErrInvalidTask     = errors.New("invalid task")
)

// jobError is what the middleware hands asynq for a failed task: its text
// becomes the task's LastErr ("CODE: cause", or msg alone), and skip makes
// asynq archive the task at once.
type jobError struct {
	code string
	msg  string
	err  error
	skip bool
	// retrying marks a coded failure that asynq retries (NO_HANDLER with
	// retries left): its event is not final.
	retrying bool
}

func (e *jobError) Error() string {
	switch {
	case e.msg != "":
		return e.msg
	case e.code == "":
		return e.err.Error()
	}
	return e.code + ": " + e.err.Error()
}

func (e *jobError) Unwrap() error { return e.err }

// Is makes asynq see asynq.SkipRetry in a skip error, without it showing in
// the text.
func (e *jobError) Is(target error) bool { return e.skip && target == asynq.SkipRetry }

// toxicError archives a task that crashed its worker too often.
func toxicError(crashes int) *jobError {
	return &jobError{msg: fmt.Sprintf("toxic: worker crashed %d times", crashes), skip: true}
}
