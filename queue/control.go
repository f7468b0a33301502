package queue

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/vigil-dev/vigil/health"
)

// Fields of the control hash (DESIGN.md §3, §6).
const (
	FieldWorkerEnabled = "worker_enabled"
	pausedFieldPrefix  = "paused:"
)

// ErrUnknownQueue is returned for a queue no pool consumes.
var ErrUnknownQueue = errors.New("unknown queue")

// Control pauses and resumes queues. Pause state lives in Redis (the control
// hash), so it holds across restarts and hosts; a queue is paused in asynq
// exactly when the global flag or its own flag says so.
type Control struct {
	rdb   redis.UniversalClient
	keys  health.Keys
	store *health.Store
	insp  *asynq.Inspector
}

// NewControl returns the control of the queues kept in store's Redis.
func NewControl(store *health.Store) *Control {
	return &Control{rdb: store.Client(), keys: store.Keys(), store: store, insp: asynq.NewInspectorFromRedisClient(store.Client())}
}

// PauseState is the pause flags as stored.
type PauseState struct {
	Global bool            // worker_enabled=false
	Queues map[string]bool // each queue's own flag
}

// Paused reports whether q is effectively paused.
func (s PauseState) Paused(q string) bool { return s.Global || s.Queues[q] }

// State reads the pause flags.
func (c *Control) State(ctx context.Context) (PauseState, error) {
	h, err := c.rdb.HGetAll(ctx, c.keys.Control()).Result()
	if err != nil {
		return PauseState{}, fmt.Errorf("read pause state: %w", err)
	}
	st := PauseState{Global: h[FieldWorkerEnabled] == "false", Queues: map[string]bool{}}
	for k, v := range h {
		if q, ok := strings.CutPrefix(k, pausedFieldPrefix); ok && v == "true" {
			st.Queues[q] = true
		}
	}
	return st, nil
}

// PauseAll sets the global pause and applies it to queues. changed is false
// when it was already paused.
func (c *Control) PauseAll(ctx context.Context, queues []string) (changed bool, err error) {
	return c.setFlag(ctx, FieldWorkerEnabled, "false", "true", queues)
}

// ResumeAll clears the global pause; a queue paused on its own stays paused.
func (c *Control) ResumeAll(ctx context.Context, queues []string) (changed bool, err error) {
	return c.setFlag(ctx, FieldWorkerEnabled, "true", "true", queues)
}

// PauseQueue sets q's own pause flag.
func (c *Control) PauseQueue(ctx context.Context, q string) (changed bool, err error) {
	if err := health.CheckName("queue", q); err != nil {
		return false, err
	}
	return c.setFlag(ctx, pausedFieldPrefix+q, "true", "false", []string{q})
}

// ResumeQueue clears q's own flag; it stays paused while the global pause
// holds.
func (c *Control) ResumeQueue(ctx context.Context, q string) (changed bool, err error) {
	if err := health.CheckName("queue", q); err != nil {
		return false, err
	}
	return c.setFlag(ctx, pausedFieldPrefix+q, "false", "false", []string{q})
}

// setFlag writes field=value (absent counts as def) and re-applies the
// effective state of queues to asynq.
func (c *Control) setFlag(ctx context.Context, field, value, def string, queues []string) (bool, error) {
	old, err := c.rdb.HGet(ctx, c.keys.Control(), field).Result()
	if errors.Is(err, redis.Nil) {
		old, err = def, nil
	}
	if err != nil {
		return false, fmt.Errorf("read %s: %w", field, err)
	}
	if err := c.rdb.HSet(ctx, c.keys.Control(), field, value).Err(); err != nil {
		return false, fmt.Errorf("write %s: %w", field, err)
	}
	return old != value, c.Apply(ctx, queues)
}

// Apply makes asynq's pause state of each queue match the flags. Hosts call
// it at start-up so that state written while they were away holds.
func (c *Control) Apply(ctx context.Context, queues []string) error {
	st, err := c.State(ctx)
	if err != nil {
		return err
	}
	for _, q := range queues {
		if st.Paused(q) {
			err = c.insp.PauseQueue(q)
			if err != nil && strings.Contains(err.Error(), "already paused") {
				err = nil
			}
		} else {
			err = c.insp.UnpauseQueue(q)
			if err != nil && strings.Contains(err.Error(), "not paused") {
				err = nil
			}
		}
		if err != nil {
			return fmt.Errorf("apply pause state to queue %s: %w", q, err)
		}
	}
	return nil
}
