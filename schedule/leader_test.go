package schedule_test

import (
	"testing"
	"time"

	"github.com/vigil-dev/vigil/schedule"
)

// A leader fires each tick once, on time; a host that does not lead fires
// nothing, nor one whose lease ran out.
func TestLeaderFiresOnTime(t *testing.T) {
	e := newEnv(t)
	e.create("every", "@every 1s", schedule.CatchUpAll)
	a := e.scheduler("a", true)
	b := e.scheduler("b", false)
	c := e.scheduler("c", false)
	c.Leading(true, t0.Add(1500*time.Millisecond)) // its lease ends at 1.5 s
	for i := 1; i <= 3; i++ {
		e.at(time.Duration(i)*time.Second + 3*time.Millisecond)
		if next := b.Step(e.ctx()); !next.IsZero() {
			t.Errorf("a host that does not lead wants to wake at %s", next)
		}
		if i > 1 {
			c.Step(e.ctx()) // lease over
		}
		next := a.Step(e.ctx())
		if want := t0.Add(time.Duration(i+1) * time.Second); !next.Equal(want) {
			t.Errorf("after tick %d the leader wakes at %s, want %s", i, next, want)
		}
	}
	if got, want := e.tasks(), tickIDs("every", secs(1, 3)...); !same(got, want) {
		t.Fatalf("tasks %v, want %v", got, want)
	}
	if got := e.pending(); !same(got, []string{tickIDs("every", time.Second)[0], tickIDs("every", 2*time.Second)[0], tickIDs("every", 3*time.Second)[0]}) {
		t.Errorf("pending in order %v", got)
	}
	v := e.view("every")
	if v.Fires != 3 || !v.LastTick.Equal(t0.Add(3*time.Second)) || v.LastTask != tickIDs("every", 3*time.Second)[0] || len(v.Tasks) != 3 ||
		!v.Next.Equal(t0.Add(4*time.Second)) {
		t.Errorf("view after three ticks: %+v", v)
	}
	fired := e.events(schedule.EventFired)
	if len(fired) != 3 || fired[0]["result"] != "enqueued" || fired[0]["host"] != "a" || fired[0]["lag_ms"].(float64) != 3 {
		t.Errorf("schedule_fired events: %v", fired)
	}
	if n := e.fires.get("every/enqueued"); n != 3 {
		t.Errorf("fires counted %d, want 3", n)
	}
}

// Leader change between two ticks: the new leader fires the ticks the old
// one did not, by the catch-up policy, and none it fired. A 10-minute
// schedule; the old leader fired 10:00 and 20:00 and died; the new one
// starts at 45:00, when 30:00 and 40:00 are due, 40:00 five minutes late
// (past the one-minute grace).
func TestLeaderChangeBetweenTicks(t *testing.T) {
	const m = time.Minute
	tests := []struct {
		policy  schedule.CatchUp
		want    []time.Duration
		skipped float64
	}{
		{schedule.CatchUpNone, []time.Duration{10 * m, 20 * m}, 2},
		{schedule.CatchUpLast, []time.Duration{10 * m, 20 * m, 40 * m}, 1},
		{schedule.CatchUpAll, []time.Duration{10 * m, 20 * m, 30 * m, 40 * m}, 0},
	}
	for _, tt := range tests {
		t.Run(string(tt.policy), func(t *testing.T) {
			e := newEnv(t)
			e.create("ten", "@every 10m", tt.policy)
			a := e.scheduler("a", true)
			e.at(10*m + time.Millisecond)
			a.Step(e.ctx())
			e.at(20*m + time.Millisecond)
			a.Step(e.ctx())
			// a is SIGKILLed: it never steps again. b claims the lease.
			e.at(45 * m)
			b := e.scheduler("b", true)
			b.Step(e.ctx())
			if got, want := e.tasks(), tickIDs("ten", tt.want...); !same(got, want) {
				t.Fatalf("tasks %v, want %v", got, want)
			}
			missed := e.events(schedule.EventMissed)
			if len(missed) != 1 || missed[0]["missed"].(float64) != 2 || missed[0]["skipped"].(float64) != tt.skipped ||
				missed[0]["policy"] != string(tt.policy) || missed[0]["host"] != "b" ||
				missed[0]["first_missed"].(float64) != float64(t0.Add(30*m).UnixMilli()) || missed[0]["last_missed"].(float64) != float64(t0.Add(40*m).UnixMilli()) {
				t.Errorf("schedule_missed events: %v", missed)
			}
			// Whatever was decided stays decided: the old leader, back with
			// its old view, and the new one later, fire only 50:00.
			e.at(50*m + time.Millisecond)
			a.Step(e.ctx())
			b.Step(e.ctx())
			if got, want := e.tasks(), tickIDs("ten", append(tt.want, 50*m)...); !same(got, want) {
				t.Fatalf("tasks after 50:00 %v, want %v", got, want)
			}
			if v := e.view("ten"); v.Skipped != int64(tt.skipped) || v.Fires != int64(len(tt.want)+1) {
				t.Errorf("skipped %d, fires %d", v.Skipped, v.Fires)
			}
		})
	}
}

// Leader change during a tick: two hosts both believe they lead (the old
// leader paused or cut off while its lease ran out) and fire the same tick
// at the same moment. The second fire finds the tick decided, even after
// the first one's task completed and was deleted (a task id conflict alone
// would let it in again).
func TestLeaderChangeDuringTick(t *testing.T) {
	for _, done := range []bool{false, true} {
		name := "task pending"
		if done {
			name = "task completed and deleted"
		}
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			e.create("every", "@every 1s", schedule.CatchUpAll)
			old := e.scheduler("old", true)
			e.at(time.Second + time.Millisecond)
			old.Step(e.ctx()) // old has read the schedule: last tick none
			cur := e.scheduler("new", true)
			e.at(2*time.Second + time.Millisecond)
			hit := 0
			old.BeforeFire(func(string, time.Time) {
				// old has planned tick 2 and is about to fire it: new fires it
				// first, and a worker runs it to completion.
				if hit++; hit == 1 {
					cur.Step(e.ctx())
					if done {
						e.complete(tickIDs("every", 2*time.Second)[0])
					}
				}
			})
			old.Step(e.ctx())
			if hit != 1 {
				t.Fatalf("the hook ran %d times", hit)
			}
			want := tickIDs("every", time.Second, 2*time.Second)
			if done {
				want = tickIDs("every", time.Second)
			}
			if got := e.tasks(); !same(got, want) {
				t.Fatalf("tasks %v, want %v", got, want)
			}
			if n := len(e.events(schedule.EventFired)); n != 2 {
				t.Errorf("%d schedule_fired events, want 2", n)
			}
			// Both go on; each later tick once.
			e.at(3*time.Second + time.Millisecond)
			old.Step(e.ctx())
			cur.Step(e.ctx())
			if n := len(e.events(schedule.EventFired)); n != 3 {
				t.Errorf("%d schedule_fired events after tick 3, want 3", n)
			}
		})
	}
}

// A tick fired but whose reply (or the leader) was lost: the next leader
// reads the record and does not fire it again.
func TestNewLeaderReadsDecidedTicks(t *testing.T) {
	e := newEnv(t)
	e.create("every", "@every 1s", schedule.CatchUpAll)
	a := e.scheduler("a", true)
	e.at(time.Second + time.Millisecond)
	a.Step(e.ctx())
	e.complete(tickIDs("every", time.Second)[0])
	b := e.scheduler("b", true)
	b.Step(e.ctx()) // same moment
	e.at(2*time.Second + time.Millisecond)
	b.Step(e.ctx())
	if got, want := e.pending(), tickIDs("every", 2*time.Second); !same(got, want) {
		t.Fatalf("pending %v, want %v", got, want)
	}
}
