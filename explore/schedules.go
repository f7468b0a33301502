package explore

import (
	"context"
	"slices"
	"time"

	"github.com/vigil-dev/vigil/schedule"
)

// The seed's periodic task: every host configures it, the
// leader fires it each second into a queue no worker consumes, so that
// every fired tick stays there to be counted at the end.
const (
	schedName  = "tick"
	schedQueue = "sched"
	schedEvery = time.Second
)

func schedDefinitions() []schedule.Definition {
	return []schedule.Definition{{Name: schedName, Spec: "@every 1s", Queue: schedQueue, Type: "tick",
		CatchUp: schedule.CatchUpAll}}
}

// TickStats is what the seed's schedule did.
type TickStats struct {
	Fired int // ticks found enqueued
	Twice int // ticks enqueued more than once
	Gaps  int // ticks missing between the first and the last
}

// schedLate is how far behind now the last fired tick may be when the
// seed ends: a leader lease to move leadership, a refresh, a tick.
const schedLate = Lease + 3*time.Second

// judgeSchedules checks invariant 10 while every host still runs: since
// the schedule was (last) written — at the first host's start, or again
// after Redis lost its data — every tick was enqueued exactly once
// (catch_up all: a tick missed during a fault fires late, never not at
// all), and the leader is still firing. Ticks enqueued before a data loss
// went with the data: they are out of sight, not excused.
func (w *world) judgeSchedules() TickStats {
	var st TickStats
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	now := time.Now()
	ids, err := w.rdb.LRange(ctx, "asynq:{"+schedQueue+"}:pending", 0, -1).Result()
	if err != nil {
		w.violate(0, "read the schedule's tasks: %v", err)
		return st
	}
	seen := map[time.Time]int{}
	var ticks []time.Time
	for _, id := range ids {
		name, tick, ok := schedule.TickOf(id)
		if !ok || name != schedName {
			w.violate(10, "task %q in the schedule's queue is no tick of %q", id, schedName)
			continue
		}
		if seen[tick]++; seen[tick] == 1 {
			ticks = append(ticks, tick)
		}
	}
	slices.SortFunc(ticks, func(a, b time.Time) int { return a.Compare(b) })
	st.Fired = len(ticks)
	for t, n := range seen {
		if n > 1 {
			st.Twice++
			w.violate(10, "tick %s enqueued %d times", t.Format("15:04:05.000"), n)
		}
	}
	for i := 1; i < len(ticks); i++ {
		if d := ticks[i].Sub(ticks[i-1]); d != schedEvery {
			missing := int(d/schedEvery) - 1
			st.Gaps += missing
			w.violate(10, "%d ticks missing between %s and %s", missing, ticks[i-1].Format("15:04:05.000"), ticks[i].Format("15:04:05.000"))
		}
	}
	switch {
	case len(ticks) == 0:
		w.violate(10, "no tick of the schedule enqueued by the end of the seed")
	case now.Sub(ticks[len(ticks)-1]) > schedLate:
		w.violate(10, "the last tick enqueued is %s old at the end of the seed (at most %s): the schedule stopped firing",
			now.Sub(ticks[len(ticks)-1]).Round(time.Millisecond), schedLate)
	}
	return st
}
