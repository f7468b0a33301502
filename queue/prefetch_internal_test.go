package queue

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/internal/clock"
	"github.com/vigil-dev/vigil/internal/redisconn"
	"github.com/vigil-dev/vigil/internal/testlog"
	"github.com/vigil-dev/vigil/internal/testredis"
)

// prefetchEnv is a hook with 4 handler slots on a client of its own, and
// six tasks t1…t6 enqueued in that order.
type prefetchEnv struct {
	t       *testing.T
	rdb     *redis.Client // without the hook
	hooked  redis.UniversalClient
	h       *redisHook
	q       string
	m       *Metrics
	logs    *testlog.Buffer
	dequeue func() (string, error) // one dequeue call as asynq makes it: the task id taken
}

func newPrefetchEnv(t *testing.T) *prefetchEnv { return newPrefetchEnvClock(t, clock.Real{}) }

func newPrefetchEnvClock(t *testing.T, clk clock.Clock) *prefetchEnv {
	env := testredis.New(t)
	q := testQueue(t, env, "pf")
	keys := health.NewStore(env.Client, env.Prefix, 0).Keys()
	c := asynq.NewClientFromRedisClient(env.Client)
	for _, id := range []string{"t1", "t2", "t3", "t4", "t5", "t6"} {
		if _, err := c.Enqueue(asynq.NewTask("t", nil), asynq.Queue(q), asynq.TaskID(id)); err != nil {
			t.Fatal(err)
		}
	}
	hooked, err := redisconn.Open(env.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hooked.Close() })
	logs := new(testlog.Buffer)
	m := new(Metrics)
	h := newRedisHook(keys, health.ComponentID{Queue: q, Slot: 0}, 4242, slog.New(slog.NewTextHandler(logs, nil)), m,
		clk, newLink(clk), newKeptOutcomes("x", 0, m, slog.New(slog.NewTextHandler(logs, nil)), clk),
		&throttledLog{})
	h.slots = 4
	hooked.AddHook(h)
	p := &prefetchEnv{t: t, rdb: env.Client, hooked: hooked, h: h, q: q, m: m, logs: logs}
	keys4 := []string{asynqPendingKey(q), asynqPausedKey(q), asynqActiveKey(q), asynqLeaseKey(q)}
	p.dequeue = func() (string, error) {
		// asynq's own call: its script, by SHA, which the hook takes over.
		res, err := redis.NewScript(asynqDequeueSource).Run(context.Background(), hooked, keys4,
			time.Now().Add(30*time.Second).Unix(), asynqTaskPrefix(q)).Text()
		if err != nil {
			return "", err
		}
		id, ok := p.idOf(res)
		if !ok {
			t.Fatalf("dequeue returned %q, not a task message of t1…t6", res)
		}
		return id, nil
	}
	return p
}

// idOf finds which task an encoded message is (its id is in it).
func (p *prefetchEnv) idOf(msg string) (string, bool) {
	for _, id := range []string{"t1", "t2", "t3", "t4", "t5", "t6"} {
		v, err := p.rdb.HGet(context.Background(), asynqTaskPrefix(p.q)+id, "msg").Result()
		if err == nil && v == msg {
			return id, true
		}
	}
	return "", false
}

func (p *prefetchEnv) list(key string) []string {
	p.t.Helper()
	v, err := p.rdb.LRange(context.Background(), key, 0, -1).Result()
	if err != nil {
		p.t.Fatal(err)
	}
	return v
}

func (p *prefetchEnv) field(id, f string) string {
	return p.rdb.HGet(context.Background(), asynqTaskPrefix(p.q)+id, f).Val()
}

// TestPrefetch: a dequeue takes a task for each free handler slot in one
// call and hands them out in order without asking Redis again; every task
// taken is active under the owner and held (so neither the stranded-task
// sweep nor asynq's lease recovery takes it); a pause gives back what was
// taken ahead, to the front of pending in its order, with no owner left on
// it; the next dequeue takes only what the free slots ask for.
func TestPrefetch(t *testing.T) {
	p := newPrefetchEnv(t)
	owner := p.h.owner
	want := func(got string, err error, id string) {
		t.Helper()
		if err != nil || got != id {
			t.Fatalf("dequeue: got %q (%v), want %s", got, err, id)
		}
	}
	got, err := p.dequeue()
	want(got, err, "t1")
	// One call took t1…t4: four slots, none filled.
	if n := p.m.Prefetched.Load(); n != 3 {
		t.Fatalf("prefetched %d, want 3", n)
	}
	if pend := p.list(asynqPendingKey(p.q)); !slices.Equal(pend, []string{"t6", "t5"}) {
		t.Fatalf("pending %v, want [t6 t5] (t5 next)", pend)
	}
	for _, id := range []string{"t1", "t2", "t3", "t4"} {
		if p.field(id, "state") != "active" || p.field(id, ownerField) != owner || !p.h.held.holds(id, time.Now()) {
			t.Fatalf("%s: state %q owner %q held %v: want active, owned, held", id, p.field(id, "state"),
				p.field(id, ownerField), p.h.held.holds(id, time.Now()))
		}
	}
	// t2 comes from the prefetch: Redis is not asked (a stopped Redis would
	// not answer, so a miniredis-free check: the pending list is as it was).
	got, err = p.dequeue()
	want(got, err, "t2")
	if pend := p.list(asynqPendingKey(p.q)); len(pend) != 2 {
		t.Fatalf("pending %v after a hand-out from the prefetch, want it untouched", pend)
	}

	// Paused: the worker takes no task, and gives back t3 and t4.
	p.h.paused.Store(true)
	if _, err := p.dequeue(); !errors.Is(err, redis.Nil) {
		t.Fatalf("dequeue while paused: %v, want redis.Nil", err)
	}
	if n := p.m.PrefetchGivenBack.Load(); n != 2 {
		t.Fatalf("given back %d, want 2", n)
	}
	if pend := p.list(asynqPendingKey(p.q)); !slices.Equal(pend, []string{"t6", "t5", "t4", "t3"}) {
		t.Fatalf("pending %v, want [t6 t5 t4 t3] (t3 next, as before)", pend)
	}
	for _, id := range []string{"t3", "t4"} {
		if p.field(id, "state") != "pending" || p.field(id, ownerField) != "" || p.field(id, "pending_since") == "" ||
			p.h.held.holds(id, time.Now()) {
			t.Fatalf("%s given back: state %q owner %q pending_since %q held %v", id, p.field(id, "state"),
				p.field(id, ownerField), p.field(id, "pending_since"), p.h.held.holds(id, time.Now()))
		}
		if _, ok := p.h.takeCrashes(id); ok {
			t.Fatalf("%s given back: its crash counters still wait for the middleware", id)
		}
	}
	if act := p.list(asynqActiveKey(p.q)); len(act) != 2 {
		t.Fatalf("active %v, want t1 and t2 only", act)
	}

	// Resumed, t1 and t2 still held: 4 slots less 2 held = t3 now and t4
	// ahead, t5 left pending.
	p.h.paused.Store(false)
	got, err = p.dequeue()
	want(got, err, "t3")
	if pend := p.list(asynqPendingKey(p.q)); !slices.Equal(pend, []string{"t6", "t5"}) {
		t.Fatalf("pending %v, want [t6 t5]", pend)
	}
	got, err = p.dequeue()
	want(got, err, "t4")
}

// TestPrefetchGiveBackFailures: a give-back Redis refuses keeps the tasks
// prefetched (it did not run; the next call tries again, or hands them
// out), one that gets no reply drops them (it may have run: they may be
// pending, even running elsewhere, already) and takes the link down; they
// are then returning: left out of the stranded-task sweep's held list (it
// requeues those still this process's), and still taken for held by
// asynq's lease recovery (their owner lives), until a sweep is done.
func TestPrefetchGiveBackFailures(t *testing.T) {
	p := newPrefetchEnv(t)
	if got, err := p.dequeue(); err != nil || got != "t1" {
		t.Fatalf("dequeue: %q %v", got, err)
	}
	readonly := func(_ context.Context, cmd redis.Cmder) error {
		err := proto("READONLY You can't write against a read only replica.")
		cmd.SetErr(err)
		return err
	}
	p.h.giveBack(context.Background(), readonly, false)
	if n := p.h.ahead.len(); n != 3 {
		t.Fatalf("after a refused give-back %d prefetched, want 3 kept", n)
	}
	if why := p.h.gateClosed(); why != "redis refuses writes" {
		t.Fatalf("gate after a refused give-back: %q, want dequeues refused for refusedPause", why)
	}
	if !p.h.link.isUp() {
		t.Fatal("a refusal took the link down")
	}
	lost := func(_ context.Context, cmd redis.Cmder) error {
		err := errors.New("read tcp 127.0.0.1:1->127.0.0.1:2: i/o timeout")
		cmd.SetErr(err)
		return err
	}
	p.h.giveBack(context.Background(), lost, false)
	if n := p.h.ahead.len(); n != 0 {
		t.Fatalf("after a give-back with no reply %d prefetched, want none", n)
	}
	held, returning := p.h.held.snapshot(time.Now())
	slices.Sort(returning)
	if !slices.Equal(held, []string{"t1"}) || !slices.Equal(returning, []string{"t2", "t3", "t4"}) {
		t.Fatalf("after a give-back with no reply: held %v, returning %v; want [t1] (handed to asynq) and [t2 t3 t4]", held, returning)
	}
	for _, id := range []string{"t2", "t3", "t4"} {
		if !p.h.held.holds(id, time.Now()) {
			t.Fatalf("%s returning but not held for asynq's lease recovery: it would retry it as a failed attempt", id)
		}
	}
	if p.h.link.isUp() {
		t.Fatal("the link is still up after a give-back with no reply: no sweep would requeue its tasks")
	}
	p.h.held.swept(returning)
	if held, returning := p.h.held.snapshot(time.Now()); !slices.Equal(held, []string{"t1"}) || len(returning) != 0 ||
		p.h.held.holds("t3", time.Now()) {
		t.Fatalf("after the sweep: held %v, returning %v; want [t1] and none", held, returning)
	}
}

// TestPrefetchStaleGivenBack: tasks taken ahead that waited past
// prefetchFresh (Redis was away) are not handed out: meanwhile another
// host may have recovered them, and one taken ahead has not begun, so it
// must not begin here. Once Redis answers they are given back if still
// this process's, and the dequeue goes to Redis.
func TestPrefetchStaleGivenBack(t *testing.T) {
	fake := clock.NewFake(time.Now())
	p := newPrefetchEnvClock(t, fake)
	if got, err := p.dequeue(); err != nil || got != "t1" {
		t.Fatalf("dequeue: %q %v", got, err)
	}
	p.h.link.fire(evNoAnswer, errors.New("cut"))
	if _, err := p.dequeue(); !errors.Is(err, redis.Nil) {
		t.Fatalf("dequeue with the link down: %v, want redis.Nil", err)
	}
	if n := p.h.ahead.len(); n != 3 {
		t.Fatalf("%d taken ahead while Redis is away, want 3 kept", n)
	}
	// Meanwhile t2 was recovered and taken by another process.
	p.rdb.HSet(context.Background(), asynqTaskPrefix(p.q)+"t2", ownerField, "worker:other:0:1")
	fake.Advance(prefetchFresh + time.Millisecond)
	p.h.link.fire(evProbeAnswered, nil)
	p.h.link.fire(evSettled, nil)
	if !p.h.link.isUp() {
		t.Fatal("link not up")
	}
	got, err := p.dequeue()
	if err != nil || got != "t3" {
		t.Fatalf("dequeue after Redis is back: %q %v, want t3 (given back, then taken again)", got, err)
	}
	if n := p.m.PrefetchGivenBack.Load(); n != 2 {
		t.Fatalf("given back %d, want 2 (t3, t4; t2 is another's)", n)
	}
	if p.field("t2", ownerField) != "worker:other:0:1" || p.h.held.holds("t2", fake.Now()) {
		t.Fatal("t2, recovered meanwhile, was touched or is still held here")
	}
	for i, want := range []string{"t4", "t5"} {
		if got, err := p.dequeue(); err != nil || got != want {
			t.Fatalf("dequeue %d after: %q %v, want %s", i, got, err, want)
		}
	}
}

// TestPrefetchGateOrder: paused while Redis is away, the tasks taken
// ahead are kept (a give-back could not be written; sending it would only
// wait for a timeout); once Redis answers, the pause gives them back.
func TestPrefetchGateOrder(t *testing.T) {
	p := newPrefetchEnv(t)
	if got, err := p.dequeue(); err != nil || got != "t1" {
		t.Fatalf("dequeue: %q %v", got, err)
	}
	p.h.paused.Store(true)
	p.h.link.fire(evNoAnswer, errors.New("cut"))
	if _, err := p.dequeue(); !errors.Is(err, redis.Nil) {
		t.Fatalf("dequeue paused, Redis away: %v, want redis.Nil", err)
	}
	if n := p.h.ahead.len(); n != 3 || p.m.PrefetchGivenBack.Load() != 0 {
		t.Fatalf("paused with Redis away: %d taken ahead, %d given back; want 3 kept", n, p.m.PrefetchGivenBack.Load())
	}
	p.h.link.fire(evProbeAnswered, nil)
	p.h.link.fire(evSettled, nil)
	if _, err := p.dequeue(); !errors.Is(err, redis.Nil) || p.m.PrefetchGivenBack.Load() != 3 {
		t.Fatalf("paused, Redis back: %v, %d given back; want redis.Nil and 3", err, p.m.PrefetchGivenBack.Load())
	}
	p.h.paused.Store(false)
	if got, err := p.dequeue(); err != nil || got != "t2" {
		t.Fatalf("dequeue resumed: %q %v, want t2", got, err)
	}
	if n := p.h.ahead.len(); n != 2 {
		t.Fatalf("resumed: %d taken ahead, want 2 (t3, t4)", n)
	}
}

// proto is an error reply of Redis's.
type proto string

func (e proto) Error() string { return string(e) }
func (proto) RedisError()     {}

// TestPrefetchGivenBackAtStop: what asynq did not ask for before its
// shutdown returned goes back to pending as the worker stops, unowned.
func TestPrefetchGivenBackAtStop(t *testing.T) {
	p := newPrefetchEnv(t)
	if got, err := p.dequeue(); err != nil || got != "t1" {
		t.Fatalf("dequeue: %q %v", got, err)
	}
	w := &worker{hook: p.h, rdb: p.hooked, link: p.h.link}
	w.giveBackPrefetched()
	if pend := p.list(asynqPendingKey(p.q)); !slices.Equal(pend, []string{"t6", "t5", "t4", "t3", "t2"}) {
		t.Fatalf("pending %v after the stop, want [t6 t5 t4 t3 t2]", pend)
	}
	if p.h.ahead.len() != 0 || p.h.held.holds("t2", time.Now()) || p.field("t2", ownerField) != "" {
		t.Fatal("t2 given back but still prefetched, held or owned")
	}
	if act := p.list(asynqActiveKey(p.q)); !slices.Equal(act, []string{"t1"}) {
		t.Fatalf("active %v, want [t1]", act)
	}
}

// TestPrefetchBeyondFreeSlots: a worker that has timed no task takes one
// per free slot; one whose slots take 100 µs per task takes aheadRounds
// rounds more (the 5 ms budget would allow 200), within maxPrefetch; one
// whose slots take 2 ms takes 10 more (4 slots × 5 ms / 2 ms); one whose
// tasks take 50 ms takes none past its slots. A clock that did not move
// is no sample.
func TestPrefetchBeyondFreeSlots(t *testing.T) {
	p := newPrefetchEnv(t)
	h := p.h
	if n := h.want(); n != 4 {
		t.Fatalf("want with nothing timed: %d, want 4 (the free slots)", n)
	}
	h.ran(0)
	if n := h.want(); n != 4 {
		t.Fatalf("want after a zero sample: %d, want 4", n)
	}
	h.ran(100 * time.Microsecond)
	if n := h.want(); n != 4+aheadRounds*4 {
		t.Fatalf("want at 100 µs a task: %d, want %d", n, 4+aheadRounds*4)
	}
	h.cycle.Store(int64(2 * time.Millisecond))
	if n := h.want(); n != 14 {
		t.Fatalf("want at 2 ms a task: %d, want 14", n)
	}
	// The mean moves an eighth of the way: 2 ms + (50 ms − 2 ms)/8 = 8 ms.
	h.ran(50 * time.Millisecond)
	if c := time.Duration(h.cycle.Load()); c != 8*time.Millisecond {
		t.Fatalf("mean after a 50 ms sample: %v, want 8ms", c)
	}
	if n := h.want(); n != 6 {
		t.Fatalf("want at 8 ms a task: %d, want 6 (4 × 5/8 = 2 past the slots)", n)
	}
	h.cycle.Store(int64(50 * time.Millisecond))
	if n := h.want(); n != 4 {
		t.Fatalf("want at 50 ms a task: %d, want 4", n)
	}
	h.slots = 64
	h.cycle.Store(int64(100 * time.Microsecond))
	if n := h.want(); n != maxPrefetch {
		t.Fatalf("want with 64 slots: %d, want maxPrefetch %d", n, maxPrefetch)
	}
}

// TestPrefetchGiveBackIdle: tasks taken past the free slots wait for one;
// while asynq makes no dequeue call (every slot busy) the worker's idle
// check gives them back once they are older than prefetchFresh, not
// before, and not while Redis is away; to the front of pending, in order.
func TestPrefetchGiveBackIdle(t *testing.T) {
	fake := clock.NewFake(time.Now())
	p := newPrefetchEnvClock(t, fake)
	p.h.cycle.Store(int64(time.Millisecond)) // short tasks: 4 × 5 = 20 more wanted, 6 enqueued
	if got, err := p.dequeue(); err != nil || got != "t1" {
		t.Fatalf("dequeue: %q %v", got, err)
	}
	if n := p.h.ahead.len(); n != 5 {
		t.Fatalf("%d taken ahead, want 5 (t2…t6)", n)
	}
	send := func(ctx context.Context, cmd redis.Cmder) error { return p.hooked.Process(ctx, cmd) }
	ctx := context.Background()
	p.h.giveBackIdle(ctx, send)
	if n := p.h.ahead.len(); n != 5 {
		t.Fatalf("fresh tasks given back: %d left ahead, want 5", n)
	}
	fake.Advance(prefetchFresh + time.Millisecond)
	p.h.link.fire(evNoAnswer, errors.New("cut"))
	p.h.giveBackIdle(ctx, send)
	if n := p.h.ahead.len(); n != 5 {
		t.Fatalf("given back with Redis away: %d left ahead, want 5", n)
	}
	p.h.link.fire(evProbeAnswered, nil)
	p.h.link.fire(evSettled, nil)
	p.h.giveBackIdle(ctx, send)
	if n := p.h.ahead.len(); n != 0 {
		t.Fatalf("%d still ahead after the idle check, want 0", n)
	}
	if n := p.m.PrefetchGivenBack.Load(); n != 5 {
		t.Fatalf("given back %d, want 5", n)
	}
	if got, want := p.list(asynqPendingKey(p.q)), []string{"t6", "t5", "t4", "t3", "t2"}; !slices.Equal(got, want) {
		t.Fatalf("pending %v, want %v (t2 dequeued next)", got, want)
	}
	for _, id := range []string{"t2", "t6"} {
		if p.field(id, ownerField) != "" || p.h.held.holds(id, fake.Now()) {
			t.Fatalf("%s given back but still owned or held here", id)
		}
	}
	if got, err := p.dequeue(); err != nil || got != "t2" {
		t.Fatalf("dequeue after the give-back: %q %v, want t2", got, err)
	}
}

// TestPrefetchGiveBackNeverOverlapsADequeue (review of 5e9db0e): the idle
// check gives back t2…t6 while asynq's dequeue call comes. Were the call
// let through while the give-back's reply is on its way, it would take t2
// again, and the give-back's bookkeeping, keyed by task id, would then
// drop the new hold: t2 would run here unheld, and the next sweep would
// requeue it under its handler. The call waits for the give-back; t2 is
// taken again afterwards, held.
func TestPrefetchGiveBackNeverOverlapsADequeue(t *testing.T) {
	fake := clock.NewFake(time.Now())
	p := newPrefetchEnvClock(t, fake)
	p.h.cycle.Store(int64(time.Millisecond))
	if got, err := p.dequeue(); err != nil || got != "t1" {
		t.Fatalf("dequeue: %q %v", got, err)
	}
	fake.Advance(prefetchFresh + time.Millisecond)
	type result struct {
		id  string
		err error
	}
	called := make(chan result, 1)
	overlapped := false
	send := func(ctx context.Context, cmd redis.Cmder) error {
		err := p.hooked.Process(ctx, cmd) // the give-back runs in Redis
		if redis.HasErrorPrefix(err, "NOSCRIPT") {
			return err // sent again, by its source
		}
		go func() {
			id, err := p.dequeue() // asynq's next call, while the reply is on its way
			called <- result{id, err}
		}()
		select {
		case <-called:
			overlapped = true
		case <-time.After(200 * time.Millisecond): // it waits for the give-back (the pass): no signal to wait on
		}
		return err
	}
	p.h.giveBackIdle(context.Background(), send)
	if overlapped {
		t.Fatal("a dequeue call ran while a give-back's reply was on its way")
	}
	var r result
	select {
	case r = <-called:
	case <-time.After(10 * time.Second):
		t.Fatal("the dequeue call never ran after the give-back")
	}
	if r.err != nil || r.id != "t2" {
		t.Fatalf("dequeue after the give-back: %q %v, want t2", r.id, r.err)
	}
	if !p.h.held.holds("t2", fake.Now()) {
		t.Fatal("t2, taken again, is not held: the give-back's bookkeeping dropped the new hold")
	}
}
