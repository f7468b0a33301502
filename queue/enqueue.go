package queue

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"time"

	"github.com/hibiken/asynq"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/internal/clock"
)

// MaxPayloadDefault bounds a task's payload unless the client says
// otherwise.
const MaxPayloadDefault = 1 << 20

// taskIDPattern is what a caller-chosen task id (asynq.TaskID) must match:
// it becomes part of event topics (job:<q>:<id>) and of Redis keys.
var taskIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// ClientConfig configures a Client.
type ClientConfig struct {
	// Queues are the queues tasks may go to (the pools' queues); any other
	// is refused with ErrUnknownQueue.
	Queues []string
	// MaxPayload bounds a payload in bytes (0 = MaxPayloadDefault).
	MaxPayload int
	// TaskTimeouts are per-queue timeouts given to tasks enqueued with no
	// Timeout or Deadline option (asynq's default is 30 minutes).
	TaskTimeouts map[string]time.Duration
	Logger       *slog.Logger
	Clock        clock.Clock
}

// Client enqueues tasks after checking them, and announces each one
// (event created). It keeps every asynq option (Unique, TaskID, MaxRetry,
// ProcessIn, ...).
type Client struct {
	cfg   ClientConfig
	store *health.Store
	c     *asynq.Client
}

// NewClient returns a client on store's Redis.
func NewClient(store *health.Store, cfg ClientConfig) *Client {
	if cfg.MaxPayload <= 0 {
		cfg.MaxPayload = MaxPayloadDefault
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	cfg.Queues = slices.Clone(cfg.Queues)
	return &Client{cfg: cfg, store: store, c: asynq.NewClientFromRedisClient(store.Client())}
}

// Enqueue puts task on queue q with opts. It refuses, enqueuing nothing, an
// unknown queue (ErrUnknownQueue), a payload over the limit
// (ErrPayloadTooLarge), a negative ProcessIn (ErrNegativeDelay), a
// missing type, a queue option naming another queue or a TaskID unfit for
// a topic (ErrInvalidTask). Options given to asynq.NewTask travel inside
// the task and are not checked; the queue is always q.
func (c *Client) Enqueue(ctx context.Context, q string, task *asynq.Task, opts ...asynq.Option) (*asynq.TaskInfo, error) {
	if err := c.check(q, task, opts); err != nil {
		return nil, err
	}
	if d, ok := c.cfg.TaskTimeouts[q]; ok && d > 0 && !hasOpt(opts, asynq.TimeoutOpt, asynq.DeadlineOpt) {
		opts = append(opts, asynq.Timeout(d))
	}
	opts = append(opts, asynq.Queue(q))
	info, err := c.c.EnqueueContext(ctx, task, opts...)
	if err != nil {
		return nil, fmt.Errorf("enqueue %s task to %s: %w", task.Type(), q, err)
	}
	ev := JobEvent{Queue: q, ID: info.ID, Type: info.Type, State: StateCreated, MaxRetry: info.MaxRetry}
	if info.State == asynq.TaskStateScheduled {
		ev.ProcessAt = info.NextProcessAt.UnixMilli()
	}
	pipe := c.store.Client().Pipeline()
	jobEvents(ctx, c.store, pipe, c.cfg.Clock.Now(), ev)
	if _, err := pipe.Exec(ctx); err != nil {
		// The task is enqueued: only the notification is lost.
		c.cfg.Logger.Warn("announce enqueued task", "queue", q, "task", info.ID, "err", err)
	}
	return info, nil
}

func (c *Client) check(q string, task *asynq.Task, opts []asynq.Option) error {
	if err := health.CheckName("queue", q); err != nil {
		return err
	}
	if !slices.Contains(c.cfg.Queues, q) {
		return fmt.Errorf("%w: %q (known: %v)", ErrUnknownQueue, q, c.cfg.Queues)
	}
	if task == nil || task.Type() == "" {
		return fmt.Errorf("%w: a task needs a type", ErrInvalidTask)
	}
	if n := len(task.Payload()); n > c.cfg.MaxPayload {
		return fmt.Errorf("%w: %d bytes, the limit is %d", ErrPayloadTooLarge, n, c.cfg.MaxPayload)
	}
	for _, o := range opts {
		if o == nil {
			continue
		}
		switch o.Type() {
		case asynq.ProcessInOpt:
			if d, _ := o.Value().(time.Duration); d < 0 {
				return fmt.Errorf("%w: ProcessIn(%s)", ErrNegativeDelay, d)
			}
		case asynq.QueueOpt:
			if name, _ := o.Value().(string); name != q {
				return fmt.Errorf("%w: queue option %q conflicts with queue %q", ErrInvalidTask, name, q)
			}
		case asynq.TaskIDOpt:
			if id, _ := o.Value().(string); !taskIDPattern.MatchString(id) {
				return fmt.Errorf("%w: task id %q must match %s", ErrInvalidTask, truncate(id, 80), taskIDPattern)
			}
		}
	}
	return nil
}

func hasOpt(opts []asynq.Option, types ...asynq.OptionType) bool {
	for _, o := range opts {
		if o != nil && slices.Contains(types, o.Type()) {
			return true
		}
	}
	return false
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// IsDuplicate reports whether an Enqueue error means the task already
// exists (a Unique lock held, or a TaskID in use).
func IsDuplicate(err error) bool {
	return errors.Is(err, asynq.ErrDuplicateTask) || errors.Is(err, asynq.ErrTaskIDConflict)
}
