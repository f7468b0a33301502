package supervisor

import (
	"context"
	"os"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/vigil-dev/vigil/health"
)

type timerKind int

const (
	timerCheck     timerKind = iota // heartbeat deadline / start timeout
	timerRestart                    // backoff elapsed
	timerKill                       // stop_timeout elapsed: SIGKILL
	timerStartGone                  // a start in flight had the time to be stopped (waiting_start)
	numTimers
)

type exitMsg struct {
	id health.ComponentID
	at time.Time // when Wait returned
	// waited is the same moment in real time: an exit told or handled a
	// second or more after it is logged (exitLate).
	waited time.Time
	pid    int
	state  *os.ProcessState
	err    error
}

type timerMsg struct {
	id   health.ComponentID
	kind timerKind
	seq  uint64
}

type goneMsg struct {
	id  health.ComponentID
	pid int
}

type timerRef struct {
	stop func() bool
	seq  uint64
}

// monitor is the one goroutine that owns the workers. After each message
// it runs what handlers deferred (fences found by refused writes, a
// rewrite after lost data) and checks whether a shutdown has drained.
func (s *Supervisor) monitor() {
	defer s.end()
	defer close(s.dead)
	for {
		select {
		case fn := <-s.cmds:
			fn()
		case m := <-s.exits:
			s.onExit(m)
		case m := <-s.timers:
			s.onTimer(m)
		case m := <-s.gone:
			s.onGone(m)
		case <-s.up:
			s.onRedisUp()
		case <-s.ticks:
			s.tick(false)
		case <-s.pulses:
			s.pulse()
		case <-s.quit:
			s.cancelAllTimers()
			if s.cluster.tick != nil {
				s.cluster.tick()
			}
			if s.stopPulse != nil {
				s.stopPulse()
			}
			s.failPending()
			return
		}
		s.runDeferred()
		s.checkDrained()
	}
}

// deferUntilIdle runs fn once the current message is handled: a handler
// that learns something about another worker, or about the whole host,
// finishes its own step before acting on it.
func (s *Supervisor) deferUntilIdle(fn func()) { s.deferred = append(s.deferred, fn) }

func (s *Supervisor) runDeferred() {
	for len(s.deferred) > 0 {
		fn := s.deferred[0]
		s.deferred = s.deferred[1:]
		fn()
	}
}

// failPending answers whatever still waits for a stop when the monitor
// returns (only after Stop's context ended with processes alive).
func (s *Supervisor) failPending() {
	for _, w := range s.workers {
		if w.stop != nil {
			ls := w.stop.then
			w.stop.then = nil
			runThens(ls, ErrStopped)
		}
	}
}

// arm (re)schedules w's timer of kind after d; any earlier one is cancelled,
// so there is never more than one timer of a kind per component.
func (s *Supervisor) arm(w *worker, kind timerKind, d time.Duration) {
	s.disarm(w, kind)
	s.seq++
	msg := timerMsg{id: w.id, kind: kind, seq: s.seq}
	t := s.cfg.Clock.AfterFunc(d, func() {
		select {
		case s.timers <- msg:
		case <-s.dead:
		}
	})
	w.timers[kind] = timerRef{stop: t.Stop, seq: s.seq}
}

func (s *Supervisor) armed(w *worker, kind timerKind) bool { return w.timers[kind].stop != nil }

func (s *Supervisor) disarm(w *worker, kind timerKind) {
	if t := w.timers[kind]; t.stop != nil {
		t.stop()
	}
	w.timers[kind] = timerRef{}
}

func (s *Supervisor) disarmAll(w *worker) {
	for k := range numTimers {
		s.disarm(w, k)
	}
}

func (s *Supervisor) cancelAllTimers() {
	for _, w := range s.workers {
		s.disarmAll(w)
	}
}

func (s *Supervisor) onTimer(m timerMsg) {
	w := s.workers[m.id]
	if w == nil || w.timers[m.kind].seq != m.seq {
		return // cancelled or replaced
	}
	w.timers[m.kind] = timerRef{}
	switch m.kind {
	case timerCheck:
		if t, ok := s.begin(w, evCheck); ok {
			s.check(t)
		}
	case timerRestart:
		t, ok := s.begin(w, evBackoffDone)
		if !ok {
			return
		}
		if s.startUnsafe(w) {
			s.holdStart(t)
			return
		}
		if w.unjudged != nil {
			s.judgeExit(t)
			return
		}
		s.cfg.Metrics.Restart(w.id.Queue, "backoff")
		if err := s.spawn(t, health.ActorMonitor, false); err != nil {
			s.keepOperatorState(t, err)
		}
	case timerStartGone:
		if t, ok := s.begin(w, evStartGone); ok {
			s.onStartGone(t)
		}
	case timerKill:
		if _, ok := s.begin(w, evStopTimeout); ok {
			s.stopTimeout(w)
		}
	}
}

// armPulse schedules the next pulse (real time, as ticks: it measures
// Redis, not the supervisor's clock).
func (s *Supervisor) armPulse() {
	t := time.AfterFunc(s.redis.pulse, func() {
		select {
		case s.pulses <- struct{}{}:
		default:
		}
	})
	s.stopPulse = t.Stop
}

// pulse makes sure the availability judgement sees a stall (see
// availability): while Redis answers and a worker is judged by heartbeat,
// one timed call at least every pulse; a PING when no other call was made.
// On a Redis Cluster, one to every shard of a running worker, outage or
// not (pulseShards).
func (s *Supervisor) pulse() {
	defer s.armPulse()
	if cc, ok := s.store.Client().(*redis.ClusterClient); ok {
		s.pulseShards(cc)
		return
	}
	if s.redis.down() || !s.redis.quiet(s.cfg.Clock.Now()) || !s.judging() {
		return
	}
	ctx, cancel := s.opCtx()
	err := pingAll(ctx, s.store.Client())
	cancel()
	if err != nil {
		s.redisFailed(err)
	}
}

// judging reports whether a worker here is judged by heartbeat.
func (s *Supervisor) judging() bool {
	for _, w := range s.workers {
		if w.state == stRunning {
			return true
		}
	}
	return false
}

// opCtx bounds one Redis call of the monitor; its cancel, called once the
// call returned, tells the availability judgement how long it took.
func (s *Supervisor) opCtx() (context.Context, context.CancelFunc) {
	return s.timedCtx(s.cfg.OpTimeout)
}

// timedCtx bounds a few Redis calls of the monitor by d; its cancel, called
// once they returned, tells the availability judgement how long they took.
func (s *Supervisor) timedCtx(d time.Duration) (context.Context, context.CancelFunc) {
	start := s.cfg.Clock.Now()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	return ctx, func() {
		cancel()
		s.answered(start)
	}
}

// answered tells the availability judgement that calls sent at start (to
// the cluster shards shs, if known) got their answers now. A slow answer
// means Redis was not answering: no heartbeat is judged until it has
// answered for a whole TTL again. It reports whether the answer was slow.
func (s *Supervisor) answered(start time.Time, shs ...shard) bool {
	return s.answeredAt(start, s.cfg.Clock.Now(), shs...)
}

// stepCalls returns a timer of the calls of a tick's steps (see
// stepCalls): waited reports its slow calls.
func (s *Supervisor) stepCalls() *stepCalls {
	return &stepCalls{now: s.cfg.Clock.Now, slow: s.redis.slow}
}

// waited tells the availability judgement of the calls c timed that took
// longer than slow: windows in which the monitor, waiting on one call in
// a step of the tick, could make no other, the pulse included. Each counts
// as a stall of every shard: no heartbeat is judged until every shard has
// answered for a whole TTL after it (availability.unseen;
// TestTickHeldWhileWorkersCannotBeatKillsNothing). Only a single call
// that long counts: a step long for its many quick calls is no stall
// (TestSlowTickStepStillJudgesHangs).
func (s *Supervisor) waited(c *stepCalls) {
	for _, w := range c.take() {
		if s.redis.unseen(w.start, w.end) {
			s.log.Warn("the monitor waited on redis: no heartbeat judged until it has answered for a whole TTL",
				"took", w.end.Sub(w.start).Round(time.Millisecond), "grace", s.cfg.Heartbeat.TTL)
		}
	}
}

func (s *Supervisor) answeredAt(start, end time.Time, shs ...shard) bool {
	slow := s.redis.answered(start, end, shs...)
	if slow {
		s.log.Warn("redis answered slowly: no heartbeat judged until it has answered for a whole TTL",
			"took", end.Sub(start).Round(time.Millisecond), "grace", s.cfg.Heartbeat.TTL)
	}
	return slow
}
