package schedule_test

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/internal/clock"
	"github.com/vigil-dev/vigil/internal/testredis"
	"github.com/vigil-dev/vigil/schedule"
)

// env is one test's world: a Redis (miniredis, or the integration
// suite's), a fake clock, a store and a queue of the test's own.
type env struct {
	t     *testing.T
	redis *testredis.Env
	hs    *health.Store
	clock *clock.Fake
	store *schedule.Store
	q     string
	insp  *asynq.Inspector
	fires *fireCounter
}

// t0 is the fake clock's start: a whole second.
var t0 = time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)

func newEnv(t *testing.T) *env { return newEnvAt(t, t0) }

// newEnvAt is newEnv with the clock at start.
func newEnvAt(t *testing.T, start time.Time) *env {
	t.Helper()
	r := testredis.New(t)
	e := &env{t: t, redis: r, hs: health.NewStore(r.Client, r.Prefix, 0), clock: clock.NewFake(start),
		q: strings.TrimSuffix(r.Prefix, ":") + "q", fires: &fireCounter{n: map[string]int{}}}
	e.store = schedule.NewStore(e.hs, schedule.StoreConfig{Queues: []string{e.q}, Clock: e.clock, Host: "h0"})
	e.insp = asynq.NewInspectorFromRedisClient(r.Client)
	t.Cleanup(func() {
		if !testredis.Real() {
			return
		}
		// asynq's keys of the test's queue are not under its prefix.
		ctx := context.Background()
		keys, _ := r.Client.Keys(ctx, "asynq:{"+e.q+"}:*").Result()
		keys = append(keys, "asynq:schedulers:{"+r.Prefix+"scheduler}")
		_ = r.Client.Del(ctx, keys...).Err()
		_ = r.Client.SRem(ctx, "asynq:queues", e.q).Err()
		_ = r.Client.ZRem(ctx, "asynq:schedulers", "asynq:schedulers:{"+r.Prefix+"scheduler}").Err()
	})
	return e
}

func (e *env) ctx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	e.t.Cleanup(cancel)
	return ctx
}

// scheduler returns a scheduler of host h on the env's Redis and clock,
// leading until far ahead when lead.
func (e *env) scheduler(h string, lead bool, tweak ...func(*schedule.Config)) *schedule.Scheduler {
	cfg := schedule.Config{Host: h, Clock: e.clock, Metrics: e.fires}
	for _, f := range tweak {
		f(&cfg)
	}
	s := schedule.New(e.hs, cfg)
	if lead {
		s.Leading(true, e.clock.Now().Add(24*365*time.Hour))
	}
	return s
}

// create adds a schedule on the env's queue.
func (e *env) create(name, spec string, policy schedule.CatchUp, opts ...func(*schedule.Definition)) schedule.View {
	e.t.Helper()
	d := schedule.Definition{Name: name, Spec: spec, Queue: e.q, Type: "report", Payload: json.RawMessage(`{"n":1}`), CatchUp: policy}
	for _, o := range opts {
		o(&d)
	}
	v, err := e.store.Create(e.ctx(), d)
	if err != nil {
		e.t.Fatalf("create %s: %v", name, err)
	}
	return v
}

// at moves the fake clock to t0 + d.
func (e *env) at(d time.Duration) {
	e.t.Helper()
	to := t0.Add(d)
	if now := e.clock.Now(); to.Before(now) {
		e.t.Fatalf("clock at %s, cannot go back to %s", now, to)
	}
	e.clock.Advance(to.Sub(e.clock.Now()))
}

// tasks returns the ids of the tasks in the env's queue (any state), in
// order.
func (e *env) tasks() []string {
	e.t.Helper()
	ids, err := e.redis.Client.Keys(e.ctx(), "asynq:{"+e.q+"}:t:*").Result()
	if err != nil {
		e.t.Fatal(err)
	}
	for i := range ids {
		ids[i] = strings.TrimPrefix(ids[i], "asynq:{"+e.q+"}:t:")
	}
	slices.Sort(ids)
	return ids
}

// pending returns the pending list of the env's queue, oldest first.
func (e *env) pending() []string {
	e.t.Helper()
	l, err := e.redis.Client.LRange(e.ctx(), "asynq:{"+e.q+"}:pending", 0, -1).Result()
	if err != nil {
		e.t.Fatal(err)
	}
	slices.Reverse(l)
	return l
}

// complete does to task id what asynq does when a task without
// retention completes: its hash and its entry are deleted.
func (e *env) complete(id string) {
	e.t.Helper()
	ctx := e.ctx()
	if n := e.redis.Client.LRem(ctx, "asynq:{"+e.q+"}:pending", 0, id).Val(); n != 1 {
		e.t.Fatalf("complete %s: not pending", id)
	}
	e.redis.Client.Del(ctx, "asynq:{"+e.q+"}:t:"+id)
}

// tickIDs are the task ids of ticks t0+d of schedule name.
func tickIDs(name string, ds ...time.Duration) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = schedule.TickIDForTest(name, t0.Add(d))
	}
	slices.Sort(out)
	return out
}

func secs(from, to int) []time.Duration {
	var out []time.Duration
	for i := from; i <= to; i++ {
		out = append(out, time.Duration(i)*time.Second)
	}
	return out
}

// events returns the data of the stream's events of type typ.
func (e *env) events(typ string) []map[string]any {
	e.t.Helper()
	msgs, err := e.redis.Client.XRange(e.ctx(), e.hs.Keys().Events(), "-", "+").Result()
	if err != nil {
		e.t.Fatal(err)
	}
	var out []map[string]any
	for _, m := range msgs {
		if m.Values["type"] != typ {
			continue
		}
		var ev struct {
			Data map[string]any `json:"data"`
		}
		if err := json.Unmarshal([]byte(m.Values["data"].(string)), &ev); err != nil {
			e.t.Fatal(err)
		}
		out = append(out, ev.Data)
	}
	return out
}

func (e *env) view(name string) schedule.View {
	e.t.Helper()
	v, err := e.store.Get(e.ctx(), name)
	if err != nil {
		e.t.Fatal(err)
	}
	return v
}

func same(a, b []string) bool { return slices.Equal(a, b) }

// fireCounter is a schedule.Metrics that counts.
type fireCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func (f *fireCounter) ScheduleFires(name, result string, n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n[name+"/"+result] += n
}

func (f *fireCounter) ScheduleLag(time.Duration) {}

func (f *fireCounter) get(k string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n[k]
}

var _ = redis.Nil

func md5hex(b []byte) string {
	s := md5.Sum(b)
	return hex.EncodeToString(s[:])
}
