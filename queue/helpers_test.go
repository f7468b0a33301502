package queue_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/internal/testredis"
	"github.com/vigil-dev/vigil/queue"
)

// waitTimeout bounds every wait: generous, for two cores under -race.
const waitTimeout = 30 * time.Second

// qenv is one test's Redis, store and asynq queue. asynq's keys cannot be
// prefixed, so each test has a queue name of its own, and its asynq keys
// are deleted at the end.
type qenv struct {
	*testredis.Env
	tb    testing.TB
	store *health.Store
	q     string
	insp  *asynq.Inspector
	logs  *logSink
	log   *slog.Logger
}

func newQEnv(tb testing.TB) *qenv {
	tb.Helper()
	return newQEnvFrom(tb, testredis.New(tb))
}

// newQEnvFrom is newQEnv on env.
func newQEnvFrom(tb testing.TB, env *testredis.Env) *qenv {
	tb.Helper()
	e := &qenv{Env: env, tb: tb, store: health.NewStore(env.Client, env.Prefix, 100_000), q: "q" + randHex(4),
		insp: asynq.NewInspectorFromRedisClient(env.Client), logs: &logSink{}}
	e.log = slog.New(slog.NewTextHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	tb.Cleanup(func() {
		if tb.Failed() {
			tb.Logf("log:\n%s", e.logs.String())
		}
		if env.Mini == nil {
			deleteAsynqQueue(env.Client, e.q)
		}
	})
	return e
}

// deleteAsynqQueue removes every asynq key of queue q from a shared Redis.
func deleteAsynqQueue(rdb *redis.Client, q string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	iter := rdb.Scan(ctx, 0, "asynq:{"+q+"}:*", 1000).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	for len(keys) > 0 {
		n := min(len(keys), 500)
		rdb.Del(ctx, keys[:n]...)
		keys = keys[n:]
	}
	rdb.SRem(ctx, "asynq:queues", q)
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// workerEnv is the environment a supervisor would give slot's worker.
func (e *qenv) workerEnv(slot int) health.WorkerEnv {
	return health.WorkerEnv{
		RedisURL: e.URL, Prefix: e.Prefix, Component: health.ComponentID{Queue: e.q, Slot: slot}, Host: "h1",
		Concurrency: 1, TaskTimeout: time.Minute, HeartbeatInterval: 100 * time.Millisecond,
		HeartbeatTTL: 2 * time.Second, ShutdownTimeout: 2 * time.Second, JobCrashRetries: 2,
		ScratchDir: e.tb.TempDir(),
	}
}

// config is a worker config for slot with fast polling and retries.
func (e *qenv) config(slot int) queue.WorkerConfig {
	return queue.WorkerConfig{
		Env: e.workerEnv(slot), Logger: e.log, Metrics: new(queue.Metrics),
		TaskCheckInterval: 20 * time.Millisecond, DelayedTaskCheckInterval: 100 * time.Millisecond,
		RetryDelay: func(int, error, *asynq.Task) time.Duration { return 10 * time.Millisecond },
	}
}

// runWorker runs RunWorker in the background; the returned stop cancels it
// and returns its error. It is stopped at cleanup if the test did not.
func (e *qenv) runWorker(cfg queue.WorkerConfig, handlers map[string]asynq.Handler) (stop func() error) {
	e.tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- queue.RunWorker(ctx, cfg, handlers) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-done:
			case <-time.After(waitTimeout):
				err = errors.New("RunWorker did not return")
			}
		})
		return err
	}
	e.tb.Cleanup(func() {
		if err := stop(); err != nil {
			e.tb.Errorf("worker: %v", err)
		}
	})
	return stop
}

// client is an enqueue client for the test's queue.
func (e *qenv) client() *queue.Client {
	return queue.NewClient(e.store, queue.ClientConfig{Queues: []string{e.q}, Logger: e.log})
}

func (e *qenv) enqueue(c *queue.Client, typ, payload string, opts ...asynq.Option) string {
	e.tb.Helper()
	info, err := c.Enqueue(context.Background(), e.q, asynq.NewTask(typ, []byte(payload)), opts...)
	if err != nil {
		e.tb.Fatalf("enqueue %s: %v", typ, err)
	}
	return info.ID
}

// streamEvent is one entry of the event stream.
type streamEvent struct {
	id  string
	ev  health.Event
	job queue.JobEvent
}

func decodeEntries(tb testing.TB, msgs []redis.XMessage) []streamEvent {
	tb.Helper()
	out := make([]streamEvent, 0, len(msgs))
	for _, m := range msgs {
		// An entry that is also another topic's (a job event, also on
		// queue:jobs) is two events, as the admin server sends them.
		for _, ee := range health.EntryEvents(m.Values) {
			var se streamEvent
			se.id = m.ID
			if ee.Also {
				se.id += ".1"
			}
			if err := json.Unmarshal(ee.Data, &se.ev); err != nil {
				tb.Fatalf("decode event %s: %v", se.id, err)
			}
			if se.ev.Type == health.EventJob {
				je, err := queue.DecodeJobEvent(se.ev)
				if err != nil {
					tb.Fatalf("decode job event %s: %v", se.id, err)
				}
				se.job = je
			}
			out = append(out, se)
		}
	}
	return out
}

// events returns every event on topic so far.
func (e *qenv) events(topic string) []streamEvent {
	e.tb.Helper()
	msgs, err := e.Client.XRange(context.Background(), e.store.Keys().Events(), "-", "+").Result()
	if err != nil {
		e.tb.Fatalf("XRANGE: %v", err)
	}
	var out []streamEvent
	for _, se := range decodeEntries(e.tb, msgs) {
		if se.ev.Topic == topic {
			out = append(out, se)
		}
	}
	return out
}

// states lists the job states of task id's events, in order.
func (e *qenv) states(id string) []queue.JobState {
	var out []queue.JobState
	for _, se := range e.events(queue.JobTopic(e.q, id)) {
		out = append(out, se.job.State)
	}
	return out
}

// watcher follows the event stream from where it was made, keeping what
// it read.
type watcher struct {
	e    *qenv
	last string
	seen []streamEvent
}

func (e *qenv) watch() *watcher {
	e.tb.Helper()
	last := "0"
	msgs, err := e.Client.XRevRangeN(context.Background(), e.store.Keys().Events(), "+", "-", 1).Result()
	if err != nil {
		e.tb.Fatalf("XREVRANGE: %v", err)
	}
	if len(msgs) == 1 {
		last = msgs[0].ID
	}
	return &watcher{e: e, last: last}
}

// next blocks for the next events, up to d (0: does not block); nil when
// none came.
func (w *watcher) next(d time.Duration) []streamEvent {
	w.e.tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d+time.Second)
	defer cancel()
	block := d
	if block <= 0 {
		block = -1 // no BLOCK: BLOCK 0 would wait forever
	}
	res, err := w.e.Client.XRead(ctx, &redis.XReadArgs{Streams: []string{w.e.store.Keys().Events(), w.last}, Block: block, Count: 1000}).Result()
	if errors.Is(err, redis.Nil) || errors.Is(err, context.DeadlineExceeded) {
		return nil
	}
	if err != nil {
		w.e.tb.Fatalf("XREAD: %v", err)
	}
	if len(res) == 0 || len(res[0].Messages) == 0 {
		return nil
	}
	msgs := res[0].Messages
	w.last = msgs[len(msgs)-1].ID
	news := decodeEntries(w.e.tb, msgs)
	w.seen = append(w.seen, news...)
	return news
}

// until reads events until ok, given every event read since the watcher
// was made, says the condition holds (it is asked before any read, and
// after each), failing the test after timeout.
func (w *watcher) until(what string, timeout time.Duration, ok func(seen []streamEvent) bool) {
	w.e.tb.Helper()
	deadline := time.Now().Add(timeout)
	for !ok(w.seen) {
		left := time.Until(deadline)
		if left <= 0 {
			w.e.tb.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		w.next(min(left, 500*time.Millisecond))
	}
}

// untilJob waits for a job event of task id in state st and returns it.
func (w *watcher) untilJob(id string, st queue.JobState) queue.JobEvent {
	w.e.tb.Helper()
	var got queue.JobEvent
	w.until("task "+id+" "+string(st), waitTimeout, func(seen []streamEvent) bool {
		for _, se := range seen {
			if se.ev.Topic == queue.JobTopic(w.e.q, id) && se.job.State == st {
				got = se.job
				return true
			}
		}
		return false
	})
	return got
}

// logSink collects log output for failed tests, and tells waiters when a
// line they wait for is written.
type logSink struct {
	mu      sync.Mutex
	b       bytes.Buffer
	waiters []logWaiter
}

type logWaiter struct {
	sub string
	ch  chan struct{}
}

func (s *logSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	kept := s.waiters[:0]
	for _, w := range s.waiters {
		if bytes.Contains(p, []byte(w.sub)) {
			close(w.ch)
		} else {
			kept = append(kept, w)
		}
	}
	s.waiters = kept
	return s.b.Write(p)
}

// waitFor returns a channel closed once a log line containing sub is
// written (at once if one was).
func (s *logSink) waitFor(sub string) <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := make(chan struct{})
	if strings.Contains(s.b.String(), sub) {
		close(ch)
	} else {
		s.waiters = append(s.waiters, logWaiter{sub, ch})
	}
	return ch
}

// untilLog waits, at most waitTimeout, until a log line containing sub is
// written.
func (e *qenv) untilLog(sub string) {
	e.tb.Helper()
	select {
	case <-e.logs.waitFor(sub):
	case <-time.After(waitTimeout):
		e.tb.Fatalf("no log line %q in %s", sub, waitTimeout)
	}
}

func (s *logSink) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func (s *logSink) contains(sub string) bool { return strings.Contains(s.String(), sub) }
