package queue

import (
	"context"
	"crypto/rand"
	"encoding/hex"
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
	// Retentions are per-queue Retention given to tasks enqueued with no
	// Retention option: asynq keeps such a task, completed, that long, so
	// that its job route still answers (asynq's default is 0: deleted).
	Retentions map[string]time.Duration
	// MaxRetries are per-queue MaxRetry given to tasks enqueued with no
	// MaxRetry option (asynq's default is 25).
	MaxRetries map[string]int
	Logger     *slog.Logger
	Clock      clock.Clock
	// Durable, with Replicas > 0, makes Enqueue return only once the task
	// reached that many replicas (ErrNotDurable if not in time).
	Durable DurableConfig
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
// a topic (ErrInvalidTask), and a TaskID in use (asynq.ErrTaskIDConflict).
// Options given to asynq.NewTask travel inside the task and are not
// checked; the queue is always q.
//
// The created event is written before the task is enqueued, so that no
// worker's processing event can precede it in the stream; if asynq then
// refuses the task (a Unique duplicate, a race on a TaskID, Redis), an
// error event with the code NOT_ENQUEUED follows it.
func (c *Client) Enqueue(ctx context.Context, q string, task *asynq.Task, opts ...asynq.Option) (*asynq.TaskInfo, error) {
	if err := c.check(q, task, opts); err != nil {
		return nil, err
	}
	id, given := optValue[string](opts, asynq.TaskIDOpt)
	if !given {
		id = newTaskID()
		opts = append(opts, asynq.TaskID(id))
	} else if n, err := c.store.Client().Exists(ctx, asynqTaskKey(q, id)).Result(); err != nil || n > 0 {
		if err == nil {
			err = asynq.ErrTaskIDConflict
			DefaultMetrics.DuplicateSkips.Add(1)
		}
		return nil, fmt.Errorf("enqueue %s task %s to %s: %w", task.Type(), id, q, err)
	}
	if d, ok := c.cfg.TaskTimeouts[q]; ok && d > 0 && !hasOpt(opts, asynq.TimeoutOpt, asynq.DeadlineOpt) {
		opts = append(opts, asynq.Timeout(d))
	}
	if d := c.cfg.Retentions[q]; d > 0 && !hasOpt(opts, asynq.RetentionOpt) {
		opts = append(opts, asynq.Retention(d))
	}
	if n, ok := c.cfg.MaxRetries[q]; ok && !hasOpt(opts, asynq.MaxRetryOpt) {
		opts = append(opts, asynq.MaxRetry(n))
	}
	opts = append(opts, asynq.Queue(q))

	now := c.cfg.Clock.Now()
	ev := JobEvent{Queue: q, ID: id, Type: task.Type(), State: StateCreated, MaxRetry: asynqDefaultMaxRetry}
	if n, ok := optValue[int](opts, asynq.MaxRetryOpt); ok {
		ev.MaxRetry = max(n, 0)
	}
	if d, ok := optValue[time.Duration](opts, asynq.ProcessInOpt); ok && d > 0 {
		ev.ProcessAt = now.Add(d).UnixMilli()
	}
	if at, ok := optValue[time.Time](opts, asynq.ProcessAtOpt); ok && at.After(now) {
		ev.ProcessAt = at.UnixMilli()
	}
	if err := c.announce(ctx, now, ev, q); err != nil {
		return nil, fmt.Errorf("enqueue %s task to %s: announce it: %w", task.Type(), q, err)
	}
	info, err := c.c.EnqueueContext(ctx, task, opts...)
	if IsDuplicate(err) {
		DefaultMetrics.DuplicateSkips.Add(1)
	}
	if err != nil {
		err = fmt.Errorf("enqueue %s task to %s: %w", task.Type(), q, err)
		ev.State, ev.Code, ev.Error, ev.Final = StateError, CodeNotEnqueued, err.Error(), true
		if aerr := c.announce(context.WithoutCancel(ctx), c.cfg.Clock.Now(), ev); aerr != nil {
			c.cfg.Logger.Warn("announce a task not enqueued", "queue", q, "task", id, "err", aerr)
		}
		return nil, err
	}
	if c.cfg.Durable.Replicas > 0 {
		n, err := waitReplicas(ctx, c.store.Client(), c.store.Keys(), q, c.cfg.Durable)
		if err == nil && n < c.cfg.Durable.Replicas {
			err = fmt.Errorf("%w: %d of %d replicas within %s", ErrNotDurable, n, c.cfg.Durable.Replicas, c.cfg.Durable.Timeout)
		}
		if err != nil {
			DefaultMetrics.NotDurable.Add(1)
			return info, fmt.Errorf("enqueue %s task %s to %s: %w", task.Type(), id, q, err)
		}
	}
	return info, nil
}

// announce writes ev; with register, it also lists that queue in asynq's
// index of queues, in the same round trip. asynq's client does that only
// the first time a process enqueues to a queue, so after Redis lost its
// data the queue would stay unknown to asynq's Inspector (the API showing
// zero counts while tasks wait) until some enqueuing process restarted.
func (c *Client) announce(ctx context.Context, at time.Time, ev JobEvent, register ...string) error {
	pipe := c.store.Client().Pipeline()
	for _, q := range register {
		pipe.SAdd(ctx, asynqAllQueuesKey, q)
	}
	jobEvents(ctx, c.store, pipe, at, ev)
	_, err := pipe.Exec(ctx)
	return err
}

// optValue returns the value of the last option of type t in opts (asynq
// applies them in order), if any.
func optValue[T any](opts []asynq.Option, t asynq.OptionType) (v T, ok bool) {
	for _, o := range opts {
		if o != nil && o.Type() == t {
			if x, isT := o.Value().(T); isT {
				v, ok = x, true
			}
		}
	}
	return v, ok
}

// newTaskID returns a random (version 4) UUID, as asynq would give.
func newTaskID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
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
