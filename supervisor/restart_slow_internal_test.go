package supervisor

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/internal/clock"
	"github.com/vigil-dev/vigil/internal/faultproxy"
	"github.com/vigil-dev/vigil/internal/testlog"
	"github.com/vigil-dev/vigil/internal/testredis"
)

// Review of 8981748 (invariant 4): a call of restartUnseen's that is slow
// (INFO held by a proxy until it times out, or dropped and tried again by
// go-redis over a slow link, PING answering at once after it) counted as
// a stall at every judgement, and each stall gave the TTL of grace: a hung
// worker was never killed, and no Redis ever restarted. Now a slow call
// puts a judgement off once per process until a beat of it is read.

// shiftedClock is the real clock moved on by Advance: the calls the
// monitor times take real time (a held reply is slow), and the TTL of
// grace between two judgements passes at once.
type shiftedClock struct{ off atomic.Int64 }

func (c *shiftedClock) Now() time.Time { return time.Now().Add(time.Duration(c.off.Load())) }

func (c *shiftedClock) AfterFunc(d time.Duration, f func()) clock.Timer { return time.AfterFunc(d, f) }

func (c *shiftedClock) Advance(d time.Duration) { c.off.Add(int64(d)) }

// slowInfoSetup is a supervisor judging one healthy worker (healthyWorker)
// through a proxy in front of a real redis-server, with go-redis's default
// retries (as redisconn configures it), a TTL of 1 s and an OpTimeout of
// 300 ms (a call slower than 150 ms is slow).
type slowInfoSetup struct {
	srv   *testredis.Server
	s     *Supervisor
	w     *worker
	p     *faultproxy.Proxy
	rdb   *redis.Client
	clk   *shiftedClock
	logs  *testlog.Buffer
	judge func()
}

func newSlowInfoSetup(t *testing.T) *slowInfoSetup { return newSlowInfoSetupOf(t, true) }

// newSlowInfoSetupOf is newSlowInfoSetup; with beaten false the worker has
// never beaten (its record says starting, its start_timeout is 1 s): it
// is judged by start_timeout, not by a heartbeat's expiry.
func newSlowInfoSetupOf(t *testing.T, beaten bool) *slowInfoSetup {
	t.Helper()
	srv := testredis.StartServer(t)
	p := testredis.ProxyTo(t, srv.URL)
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	x := &slowInfoSetup{srv: srv, p: p, rdb: rdb, clk: &shiftedClock{}, logs: &testlog.Buffer{}}
	store := health.NewStore(rdb, "vigil:", 0)
	var err error
	x.s, err = New(Config{
		Host: "h", Clock: x.clk, OpTimeout: 300 * time.Millisecond,
		Pools:     []Pool{{Queue: "q", Workers: 1, Command: []string{"true"}}},
		Heartbeat: Heartbeat{Interval: 300 * time.Millisecond, TTL: time.Second, StartTimeout: time.Second},
		Logger:    slog.New(slog.NewTextHandler(x.logs, nil)),
	}, store)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { close(x.s.dead); x.s.wg.Wait() }) // a probe, if an outage began
	x.w = healthyWorker(t, x.s, rdb)
	if beaten {
		x.judge = readAlive(t, x.s, x.w, rdb, x.logs)
		return x
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	x.w.rec.Status = health.StatusStarting
	if err := rdb.HSet(ctx, store.Keys().Component(x.w.id), health.FieldStatus, string(health.StatusStarting)).Err(); err != nil {
		t.Fatal(err)
	}
	x.judge = func() { x.s.check(step{s: x.s, w: x.w, ev: evCheck, from: stRunning}) }
	return x
}

// beatLost deletes the worker's heartbeat key (it hung, or Redis lost it)
// and lets the grace of any slow call before pass.
func (x *slowInfoSetup) beatLost(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := x.rdb.Del(ctx, x.s.store.Keys().Heartbeat(x.w.id)).Err(); err != nil {
		t.Fatal(err)
	}
	x.pass()
}

// pass moves the clock past any grace running, as the monitor would wait,
// and reports whether one was.
func (x *slowInfoSetup) pass() bool {
	d := x.s.redis.answeredFor(wholeRedis, x.s.cfg.Heartbeat.TTL, x.s.cfg.Clock.Now())
	if d > 0 {
		x.clk.Advance(d + time.Millisecond)
	}
	return d > 0
}

// judgeHeld judges the worker with INFO's next reply held (the call times
// out), and reports whether the worker was killed. A heartbeat read slow
// for the machine's load puts the judgement off before INFO is asked: the
// clock is moved past that grace and the worker judged again.
func (x *slowInfoSetup) judgeHeld(t *testing.T) bool {
	t.Helper()
	held, release := x.p.HoldReply(func(args []string) bool { return len(args) > 0 && strings.EqualFold(args[0], "info") })
	defer release()
	mark := len(x.logs.String())
	for range 5 {
		x.s.disarmAll(x.w)
		x.judge()
		select {
		case <-held:
		default:
			if x.s.armed(x.w, timerCheck) && x.pass() { // the heartbeat read was slow
				continue
			}
			t.Fatalf("INFO was not asked (its reply not held): the test tests nothing:\n%s", x.logs)
		}
		break
	}
	if x.s.redis.down() {
		t.Fatalf("an outage begun for a held INFO that its server answered PING after:\n%s", x.logs)
	}
	killed := strings.Contains(x.logs.String()[mark:], "killing worker")
	if !killed && !x.s.armed(x.w, timerCheck) {
		t.Fatalf("the worker is neither killed nor judged again:\n%s", x.logs)
	}
	return killed
}

// TestHangKilledWhenInfoIsHeld: a proxy that holds every INFO reply (until
// the call times out) and answers everything else. A hung worker gets one
// TTL of grace for the first slow call and is killed at the next
// judgement. Before the fix it was judged again a TTL later, every time.
func TestHangKilledWhenInfoIsHeld(t *testing.T) {
	x := newSlowInfoSetup(t)
	x.beatLost(t)
	if x.judgeHeld(t) {
		t.Fatalf("killed at the first slow INFO: a stall there (TestInfoStallAtAJudgementKillsNothing) would kill a healthy worker:\n%s", x.logs)
	}
	for i := 2; i <= 4; i++ {
		x.pass()
		if x.judgeHeld(t) {
			if i != 2 {
				t.Errorf("killed at judgement %d, want 2", i)
			}
			if !strings.Contains(x.logs.String(), "slow again, no beat read since") {
				t.Errorf("the kill does not say why:\n%s", x.logs)
			}
			return
		}
	}
	t.Fatalf("a hung worker judged 4 times, INFO held each time, never killed:\n%s", x.logs)
}

// TestStartTimeoutKilledWhenInfoIsHeld: the same for a worker that never
// beat, judged by start_timeout: put off once for the first slow INFO (it
// moves when the shard answers from, and start_timeout counts from there),
// killed at the next judgement. Without unseenKill in that branch it was
// put off at every judgement (review of 1361749, which found the branch
// untested).
func TestStartTimeoutKilledWhenInfoIsHeld(t *testing.T) {
	x := newSlowInfoSetupOf(t, false)
	x.clk.Advance(2 * x.s.cfg.Heartbeat.StartTimeout)
	if x.judgeHeld(t) {
		t.Fatalf("killed at the first slow INFO: a stall there would kill a worker starting late for it:\n%s", x.logs)
	}
	for i := 2; i <= 4; i++ {
		x.clk.Advance(2 * x.s.cfg.Heartbeat.StartTimeout)
		if x.judgeHeld(t) {
			if i != 2 {
				t.Errorf("killed at judgement %d, want 2", i)
			}
			if out := x.logs.String(); !strings.Contains(out, "no heartbeat within start_timeout") || !strings.Contains(out, "slow again") {
				t.Errorf("not killed for start_timeout after a second slow INFO:\n%s", out)
			}
			return
		}
	}
	t.Fatalf("a worker that never beat, judged 4 times, INFO held each time, never killed:\n%s", x.logs)
}

// TestSlowInfoGraceAgainAfterABeat (invariant 5): the grace a slow INFO
// gives is once per process until a beat of it is read, not once per
// process: a healthy worker whose key two stalls cost, its beat read
// between them, is never killed. (A count of slow calls per process, or
// per supervisor, killed it at the second stall: reviews of f7c07b2 and
// 9a65c54.)
func TestSlowInfoGraceAgainAfterABeat(t *testing.T) {
	x := newSlowInfoSetup(t)
	for i := 1; i <= 3; i++ {
		x.beatLost(t)
		if x.judgeHeld(t) {
			t.Fatalf("stall %d: a healthy worker killed, its beat read after the last stall:\n%s", i, x.logs)
		}
		// It beats again: the next judgement reads its key alive.
		x.pass()
		x.s.disarmAll(x.w)
		x.judge = readAlive(t, x.s, x.w, x.rdb, x.logs)
		if x.w.proc.slowGraced {
			t.Fatalf("stall %d: the beat read did not end the slow call's grace", i)
		}
	}
}

// TestHangKilledWhenInfoDropsOverASlowLink: the proxy drops the connection
// on every INFO (TestHangKilledWhenInfoDropsTheConnection's), with
// go-redis's default retries, over a link of 20 ms a round trip: each
// INFO is tried four times, each on a new connection, and the call from
// INFO's start to PING's answer is slow. The hung worker is killed at its
// second judgement. Before the fix, never.
func TestHangKilledWhenInfoDropsOverASlowLink(t *testing.T) {
	x := newSlowInfoSetup(t)
	isInfo := func(args []string) bool { return len(args) > 0 && strings.EqualFold(args[0], "info") }
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var drops atomic.Int64
	wg.Go(func() {
		for {
			select {
			case <-x.p.DropReply(isInfo):
				drops.Add(1)
			case <-ctx.Done():
				x.p.DropReply(nil)
				return
			}
		}
	})
	t.Cleanup(func() { cancel(); wg.Wait() })
	x.p.Delay(20 * time.Millisecond)
	x.beatLost(t)
	asked := 0 // judgements that asked INFO (a slow heartbeat read puts one off before)
	for range 8 {
		x.pass()
		mark, before := len(x.logs.String()), drops.Load()
		x.s.disarmAll(x.w)
		x.judge()
		if x.s.redis.down() {
			t.Fatalf("an outage begun for a dropped INFO:\n%s", x.logs)
		}
		if drops.Load() > before {
			asked++
		}
		if strings.Contains(x.logs.String()[mark:], "killing worker") {
			if asked != 2 {
				t.Errorf("killed at the judgement %d that asked INFO, want 2:\n%s", asked, x.logs)
			}
			return
		}
	}
	t.Fatalf("%d INFO replies dropped; a hung worker judged %d times with INFO, never killed:\n%s", drops.Load(), asked, x.logs)
}
