package explore

import (
	"context"
	"time"
)

// failover fails the replicated Redis over (a Failover step): the
// topology does it, the world keeps the window in which the hosts could
// not write (from the fault to the new master's announcement) and, for a
// kill, starts the old master again as a replica Dur after the switch.
func (w *world) failover(s Step) {
	t := w.be.(topology)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	win := w.b.open("", whyFailover)
	f, err := t.Failover(ctx, s.N, s.Flag)
	cancel()
	if err != nil {
		w.b.close(win)
		w.b.count(FailoverRefused)
		w.b.logf("failover of shard %d: not done: %v", s.N, err)
		return
	}
	w.b.count(s.Kind)
	if s.Flag {
		w.b.count(FailoverKill)
	} else {
		w.b.count(FailoverManual)
	}
	w.b.logf("failover: %s", f.desc)
	w.ends.Add(1)
	go func() {
		defer w.ends.Done()
		ctx, cancel := context.WithTimeout(context.Background(), switchWithin)
		msg, err := f.switched(ctx)
		cancel()
		w.b.close(win)
		if err != nil {
			w.violate(0, "failover of shard %d: %v", s.N, err)
		} else {
			w.b.logf("failover: %s", msg)
		}
		if s.Flag {
			select {
			case <-time.After(s.Dur):
			case <-w.healing:
			}
		}
		ctx, cancel = context.WithTimeout(context.Background(), syncWithin)
		msg, err = f.rejoin(ctx)
		cancel()
		if err != nil {
			w.violate(0, "failover of shard %d: the old master did not rejoin: %v", s.N, err)
			return
		}
		w.b.logf("failover: %s", msg)
	}()
}

// Counted apart in the summary: the failovers by how they were made, and
// the pauses of a master long enough to be failed over.
const (
	FailoverKill   Kind = "failover(kill)"
	FailoverManual Kind = "failover(manual)"
	PauseFailover  Kind = "redis-pause(failed over)"
	// Steps not done: the shard had no replica in sync, or was busy.
	FailoverRefused Kind = "failover(not done)"
	PauseRefused    Kind = "redis-pause(not done)"
)

// freeze is a redis-pause on a topology: the master of the step's shard
// is frozen (SIGSTOP) for Dur; a pause longer than the topology's
// detection time is a failover of a frozen master.
func (w *world) freeze(s Step) {
	t := w.be.(topology)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	win := w.b.open("", "redis paused")
	desc, thaw, err := t.Freeze(ctx, s.N)
	cancel()
	if err != nil {
		w.b.close(win)
		w.b.count(PauseRefused)
		w.b.logf("redis-pause of shard %d: not done: %v", s.N, err)
		return
	}
	w.b.count(s.Kind)
	w.b.logf("redis-pause: %s for %s", desc, s.Dur)
	w.later(s.Dur, func() {
		ctx, cancel := context.WithTimeout(context.Background(), switchWithin+syncWithin)
		defer cancel()
		msg, failedOver, err := thaw(ctx)
		w.b.close(win)
		if err != nil {
			w.violate(0, "redis-pause of shard %d: %v", s.N, err)
			return
		}
		if failedOver {
			w.b.count(PauseFailover)
		}
		w.b.logf("redis-pause over: %s", msg)
	})
}
