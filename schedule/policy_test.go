package schedule_test

import (
	"context"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/schedule"
)

// stepAlong steps s at each time it asks to be woken, up to end.
func (e *env) stepAlong(s *schedule.Scheduler, end time.Time) {
	e.t.Helper()
	for i := 0; ; i++ {
		next := s.Step(e.ctx())
		if next.IsZero() || next.After(end) {
			return
		}
		if i > 10_000 {
			e.t.Fatal("the scheduler keeps waking")
		}
		e.clock.Advance(next.Sub(e.clock.Now()) + time.Millisecond)
	}
}

// Daylight-saving changes, through the leader's loop: each tick robfig/cron
// gives fires once, on time, and no tick is counted missed.
func TestFireAcrossDST(t *testing.T) {
	day := func(n int) time.Duration { return time.Duration(n) * 24 * time.Hour }
	tests := []struct {
		name, spec string
		start      time.Time
		want       []string
	}{
		{"fall back: 01:30 New York twice on 1 November", "CRON_TZ=America/New_York 30 1 * * *",
			time.Date(2026, 10, 31, 12, 0, 0, 0, time.UTC),
			[]string{"20261101T053000.000Z", "20261101T063000.000Z", "20261102T063000.000Z"}},
		{"spring forward: no 02:30 New York on 8 March", "CRON_TZ=America/New_York 30 2 * * *",
			time.Date(2026, 3, 7, 0, 0, 0, 0, time.UTC),
			[]string{"20260307T073000.000Z", "20260309T063000.000Z"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnvAt(t, tt.start)
			e.create("dst", tt.spec, schedule.CatchUpAll)
			a := e.scheduler("a", true, func(c *schedule.Config) { c.Refresh = day(3) })
			e.stepAlong(a, tt.start.Add(day(2)+12*time.Hour))
			var want []string
			for _, w := range tt.want {
				want = append(want, "sched.dst."+w)
			}
			if got := e.tasks(); !same(got, want) {
				t.Fatalf("tasks %v, want %v", got, want)
			}
			if m := e.events(schedule.EventMissed); len(m) != 0 {
				t.Errorf("missed events: %v", m)
			}
			for _, f := range e.events(schedule.EventFired) {
				if f["lag_ms"].(float64) > 1 {
					t.Errorf("fired %v ms late", f["lag_ms"])
				}
			}
		})
	}
}

// catch_up none on a failover of a 1 s schedule: the tick on time fires,
// the ones of the gap never do; all fires each of them once.
func TestCatchUpAfterFailover(t *testing.T) {
	for _, policy := range []schedule.CatchUp{schedule.CatchUpNone, schedule.CatchUpLast, schedule.CatchUpAll} {
		t.Run(string(policy), func(t *testing.T) {
			e := newEnv(t)
			e.create("s", "@every 1s", policy)
			a := e.scheduler("a", true)
			e.at(time.Second + time.Millisecond)
			a.Step(e.ctx())
			e.at(16*time.Second + 20*time.Millisecond) // lease 15 s later
			b := e.scheduler("b", true)
			b.Step(e.ctx())
			want := tickIDs("s", time.Second, 16*time.Second)
			if policy == schedule.CatchUpAll {
				want = tickIDs("s", secs(1, 16)...)
			}
			if got := e.tasks(); !same(got, want) {
				t.Fatalf("tasks %v, want %v", got, want)
			}
			if got := e.pending(); policy == schedule.CatchUpAll && !same(got, tickIDs("s", secs(1, 16)...)) {
				t.Errorf("caught up out of order: %v", got)
			}
			wantSkipped := map[schedule.CatchUp]int{schedule.CatchUpNone: 14, schedule.CatchUpLast: 14}[policy]
			if n := e.fires.get("s/skipped"); n != wantSkipped {
				t.Errorf("skipped counted %d, want %d", n, wantSkipped)
			}
		})
	}
}

// A Redis outage on the leader: nothing fires while Redis is away (and the
// step does not fail the process); when it is back, the missed ticks go by
// the policy.
func TestCatchUpAfterRedisOutage(t *testing.T) {
	e := newEnv(t)
	if e.redis.Mini == nil {
		t.Skip("stops the test's miniredis")
	}
	e.create("s", "@every 1s", schedule.CatchUpAll)
	a := e.scheduler("a", true)
	e.at(time.Second + time.Millisecond)
	a.Step(e.ctx())
	e.redis.Mini.Close()
	e.at(2*time.Second + time.Millisecond)
	ctx, cancel := context.WithTimeout(e.ctx(), 300*time.Millisecond)
	defer cancel()
	if next := a.Step(ctx); !next.Equal(e.clock.Now().Add(500 * time.Millisecond)) {
		t.Errorf("during the outage the leader looks again at %s", next)
	}
	if err := e.redis.Mini.Restart(); err != nil {
		t.Fatal(err)
	}
	e.at(5*time.Second + time.Millisecond)
	a.Step(e.ctx())
	if got, want := e.tasks(), tickIDs("s", secs(1, 5)...); !same(got, want) {
		t.Fatalf("tasks %v, want %v", got, want)
	}
}

// A paused schedule fires nothing; resumed, it fires the ticks after the
// resume only, whatever its policy.
func TestPauseResume(t *testing.T) {
	e := newEnv(t)
	e.create("s", "@every 1s", schedule.CatchUpAll)
	a := e.scheduler("a", true)
	e.at(time.Second + time.Millisecond)
	a.Step(e.ctx())
	if _, changed, err := e.store.SetPaused(e.ctx(), "s", true); err != nil || !changed {
		t.Fatalf("pause: %v, %v", changed, err)
	}
	if _, changed, _ := e.store.SetPaused(e.ctx(), "s", true); changed {
		t.Error("a second pause changed something")
	}
	for i := 2; i <= 5; i++ {
		e.at(time.Duration(i)*time.Second + time.Millisecond)
		a.Step(e.ctx())
	}
	if v := e.view("s"); !v.Paused || !v.Next.IsZero() {
		t.Errorf("paused view: %+v", v)
	}
	e.at(5*time.Second + 500*time.Millisecond)
	if _, _, err := e.store.SetPaused(e.ctx(), "s", false); err != nil {
		t.Fatal(err)
	}
	for i := 6; i <= 7; i++ {
		e.at(time.Duration(i)*time.Second + time.Millisecond)
		a.Step(e.ctx())
	}
	if got, want := e.tasks(), tickIDs("s", time.Second, 6*time.Second, 7*time.Second); !same(got, want) {
		t.Fatalf("tasks %v, want %v", got, want)
	}
	if m := e.events(schedule.EventMissed); len(m) != 0 {
		t.Errorf("a pause counted as missed ticks: %v", m)
	}
}

// An update the leader has not read yet: its fire with the old definition
// is refused, it reads the schedule again and fires with the new one.
func TestUpdateSeenBeforeFire(t *testing.T) {
	e := newEnv(t)
	e.create("s", "@every 1s", schedule.CatchUpAll)
	a := e.scheduler("a", true)
	e.at(time.Second + time.Millisecond)
	a.Step(e.ctx())
	e.at(2*time.Second + time.Millisecond)
	a.BeforeFire(func(string, time.Time) {
		a.BeforeFire(nil)
		d := e.view("s").Definition
		d.Type = "report-v2"
		if _, err := e.store.Update(e.ctx(), "s", d); err != nil {
			t.Fatal(err)
		}
	})
	next := a.Step(e.ctx())
	if !next.Equal(e.clock.Now()) {
		t.Errorf("after a refused fire the leader looks again at %s, want now", next)
	}
	a.Step(e.ctx())
	info, err := e.insp.GetTaskInfo(e.q, tickIDs("s", 2*time.Second)[0])
	if err != nil || info.Type != "report-v2" {
		t.Fatalf("tick 2: %+v, %v", info, err)
	}
}

// Moving a schedule to another queue carries its last tick along: no tick
// fires twice, in either queue.
func TestMoveKeepsDecidedTicks(t *testing.T) {
	e := newEnv(t)
	other := e.q + "b"
	e.store = schedule.NewStore(e.hs, schedule.StoreConfig{Queues: []string{e.q, other}, Clock: e.clock})
	e.create("s", "@every 1s", schedule.CatchUpAll)
	a := e.scheduler("a", true)
	e.at(2*time.Second + time.Millisecond)
	a.Step(e.ctx())
	d := e.view("s").Definition
	d.Queue = other
	v, err := e.store.Update(e.ctx(), "s", d)
	if err != nil {
		t.Fatal(err)
	}
	if !v.LastTick.Equal(t0.Add(2*time.Second)) || v.Fires != 2 || v.Queue != other {
		t.Fatalf("moved view %+v", v)
	}
	a.Step(e.ctx())
	e.at(3*time.Second + time.Millisecond)
	a.Step(e.ctx())
	if got, want := e.tasks(), tickIDs("s", secs(1, 2)...); !same(got, want) {
		t.Errorf("old queue %v, want %v", got, want)
	}
	got, _ := e.redis.Client.LRange(e.ctx(), "asynq:{"+other+"}:pending", 0, -1).Result()
	t.Cleanup(func() {
		e.redis.Client.Del(e.ctx(), "asynq:{"+other+"}:pending", "asynq:{"+other+"}:t:"+tickIDs("s", 3*time.Second)[0])
	})
	if !same(got, tickIDs("s", 3*time.Second)) {
		t.Errorf("new queue %v", got)
	}
}
