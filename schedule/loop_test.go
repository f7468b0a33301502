package schedule_test

import (
	"testing"
	"time"

	"github.com/vigil-dev/vigil/schedule"
)

// The loop wakes at each tick on its clock while leading, and sleeps when
// not; Stop ends it (goleak checks) and is safe before Start and twice.
func TestLoop(t *testing.T) {
	e := newEnv(t)
	schedule.New(e.hs, schedule.Config{}).Stop() // before Start
	e.create("s", "@every 1s", schedule.CatchUpAll)
	s := e.scheduler("a", false)
	steps := make(chan time.Time, 16)
	s.OnStep(func(next time.Time) { steps <- next })
	wait := func(want time.Time) {
		t.Helper()
		select {
		case next := <-steps:
			if !next.Equal(want) {
				t.Fatalf("the loop will look again at %v, want %v", next, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no step within 10 s")
		}
	}
	s.Start()
	defer s.Stop()
	wait(time.Time{}) // not leading
	s.Leading(true, t0.Add(time.Hour))
	wait(t0.Add(time.Second))
	for i := 1; i <= 3; i++ {
		e.at(time.Duration(i) * time.Second)
		wait(t0.Add(time.Duration(i+1) * time.Second))
	}
	if got, want := e.tasks(), tickIDs("s", secs(1, 3)...); !same(got, want) {
		t.Fatalf("tasks %v, want %v", got, want)
	}
	s.Leading(false, time.Time{})
	wait(time.Time{})
	if p := e.clock.Pending(); len(p) != 0 {
		t.Errorf("timers left while not leading: %v", p)
	}
	s.Stop()
	s.Stop()
	s.Start() // after Stop: nothing
}
