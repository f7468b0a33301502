package supervisor

import (
	"context"
	"fmt"
	"log/slog"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/internal/clock"
	"github.com/vigil-dev/vigil/internal/redisconn"
	"github.com/vigil-dev/vigil/internal/testlog"
	"github.com/vigil-dev/vigil/internal/testredis"
)

// TestUnseenRestartThenAnOutageOfAnother (review of c19eae5, invariant 5):
// on a Redis Cluster, the server of a healthy worker's shard restarts
// while the monitor makes no call to it (its key expires meanwhile), and
// then an outage the monitor does see, of the whole Redis as far as it
// knows but not marked on this shard (a failed lease renewal, another
// shard's failure), ends. The rewrite after the outage arms the worker's
// check at once, its shard having answered all along; the key is gone.
// The monitor must still find the restart (the server started after the
// worker's last beat) and give the grace, not kill the worker.
//
// Before the fix the last beat was bounded below by judgeFrom, which the
// rewrite moves to Redis's return: the server had started before that, no
// grace, the healthy worker killed and counted.
//
// White-box, to place the outage exactly: the monitor's goroutine is not
// run; its steps (check, the outage, the return) are called in order. The
// restart is made with the clock: the monitor's fake clock moves on an
// hour past the beat, so the cluster's servers, a few seconds old, started
// after it, as after a restart the monitor did not see.
func TestUnseenRestartThenAnOutageOfAnother(t *testing.T) {
	c := testredis.StartCluster(t)
	rdb, err := redisconn.Open(c.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rdb.Close() })
	clk := clock.NewFake(time.Now())
	logs := &testlog.Buffer{}
	store := health.NewStore(rdb, "vigil:", 0)
	s, err := New(Config{
		Host: "h", Clock: clk,
		Pools:     []Pool{{Queue: "q", Workers: 1, Command: []string{"true"}}},
		Heartbeat: Heartbeat{Interval: 300 * time.Millisecond, TTL: time.Second},
		Logger:    slog.New(slog.NewTextHandler(logs, nil)),
	}, store)
	if err != nil {
		t.Fatal(err)
	}
	if s.shardOf(health.ComponentID{Queue: "q"}) == wholeRedis {
		t.Fatal("a Cluster client's worker has no shard of its own: the test tests nothing")
	}
	w := healthyWorker(t, s, rdb)
	id := w.id
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	keys := store.Keys()

	// A beat, read alive: the last beat came no earlier than now.
	judge := readAlive(t, s, w, rdb, logs)

	// The unseen restart: an hour later by the monitor's clock, its key
	// gone (expired while the server restarted).
	clk.Advance(time.Hour)
	if err := rdb.Del(ctx, keys.Heartbeat(id)).Err(); err != nil {
		t.Fatal(err)
	}
	// The outage, not marked on this shard, ends.
	s.redis.lost()
	s.onRedisUp()
	if !s.armed(w, timerCheck) || !w.judgeFrom.After(w.beatAt) {
		t.Fatalf("the rewrite did not re-arm the worker's check from Redis's return (judgeFrom %v, beatAt %v):\n%s",
			w.judgeFrom, w.beatAt, logs)
	}
	s.disarmAll(w)
	judge()

	out := logs.String()
	if strings.Contains(out, "killing worker") {
		t.Fatalf("the healthy worker was killed after an unseen restart and another outage's end:\n%s", out)
	}
	if !strings.Contains(out, "did not see: judged again") || !s.armed(w, timerCheck) {
		t.Fatalf("no grace given for the unseen restart:\n%s", out)
	}
}

// TestInfoStallAtAJudgementKillsNothing (reviews of the INFO-drop rule,
// invariant 5): Redis restarts unseen and the healthy worker's key is lost
// in it; at its judgement Redis stalls just as the monitor asks INFO (the
// reply held: the call times out, no reply), and answers again by the
// PING after it. INFO failing without a reply while its server answers
// PING is taken as INFO refused; but a call that took OpTimeout was a
// stall, which gives the grace. The worker is judged again, not killed.
// (Under the rules before, a count of such failures made the second of
// two stalls a month apart a refusal, and a healthy worker was killed.)
func TestInfoStallAtAJudgementKillsNothing(t *testing.T) {
	x := newSlowInfoSetup(t)
	// The restart (keeping the data), the key lost in it.
	x.srv.Save()
	x.srv.Stop()
	x.srv.Start()
	x.beatLost(t)
	if x.judgeHeld(t) {
		t.Fatalf("a stall at INFO taken for a refusal: the healthy worker killed:\n%s", x.logs)
	}
}

// healthyWorker makes the running, healthy worker q:0 of s, not started by
// s: a real process (sleep), and its record in Redis (written through rdb).
func healthyWorker(t *testing.T, s *Supervisor, rdb redis.Cmdable) *worker {
	t.Helper()
	p := exec.Command("sleep", "60")
	p.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Process.Kill(); _ = p.Wait() })
	id := health.ComponentID{Queue: "q", Slot: 0}
	started := s.cfg.Clock.Now()
	w := &worker{id: id, state: stRunning, proc: &process{pid: p.Process.Pid, began: started, started: started}, judgeFrom: started,
		rec: health.Component{ID: id, Status: health.StatusHealthy, Instance: s.cfg.Instance, PID: p.Process.Pid}}
	s.workers[id] = w
	t.Cleanup(func() { s.disarmAll(w) })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := rdb.HSet(ctx, s.store.Keys().Component(id), health.FieldStatus, string(health.StatusHealthy),
		health.FieldPID, strconv.Itoa(p.Process.Pid), health.FieldInstance, s.cfg.Instance).Err(); err != nil {
		t.Fatal(err)
	}
	return w
}

// readAlive writes w's heartbeat key and has the monitor read it alive
// (check, disarmed after): the last beat came no earlier than now. It
// returns the judgement, to call again.
func readAlive(t *testing.T, s *Supervisor, w *worker, rdb redis.Cmdable, logs fmt.Stringer) func() {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := rdb.Set(ctx, s.store.Keys().Heartbeat(w.id), strconv.FormatInt(time.Now().UnixMilli(), 10), time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	judge := func() { s.check(step{s: s, w: w, ev: evCheck, from: stRunning}) }
	judge()
	if !w.sawBeat {
		t.Fatalf("the beat was not read:\n%s", logs)
	}
	s.disarmAll(w)
	return judge
}
