package supervisor

import (
	"log/slog"
	"time"

	"github.com/vigil-dev/vigil/health"
)

// worker is the monitor's view of one component this host holds.
type worker struct {
	id    health.ComponentID
	pool  *Pool
	state workerState
	rec   health.Component // what this host holds true, written to Redis
	// dirty: rec not yet written (Redis unreachable). Orthogonal to state:
	// any state that writes can be dirty; it is written back when Redis
	// returns.
	dirty bool
	proc  *process  // running, stopping, releasing, fenced
	stop  *stopReq  // stopping, releasing, fenced: the stop in flight
	kill  killCause // set when the monitor killed the process itself
	// sawBeat and expires: the process's heartbeat as last read
	// (expires: when it runs out, for the crash-detection latency;
	// beatAt: a time its last beat came no earlier than).
	sawBeat bool
	expires time.Time
	beatAt  time.Time
	// judgeFrom is when start_timeout began to count: the spawn, or
	// Redis's last return (rewriteState moves it for every running
	// process: no start is judged by time Redis was away). Not a bound of
	// the last beat (beatAt, proc.began).
	judgeFrom time.Time
	// outage is the outage during which the current process was started
	// (0: Redis was reachable). Its exit before the monitor saw it beat is
	// not counted: it may never have reached Redis.
	outage uint64
	// uncounted is how many restarts were not counted since Redis went
	// away; their backoff grows with it.
	uncounted int
	oldPID    int // waitingOld: the earlier supervisor's process
	// unjudged (backoff only): an exit seen while Redis was away, not
	// counted yet. A crash, or another host's takeover of a lease Redis
	// lost: the verdict waits until Redis answers (see exitUnjudged).
	unjudged *exitSeen
	timers   [numTimers]timerRef
	// This host's hold on the slot's lease, in real time (leases expire on
	// Redis's clock): heldAt is when the last call that found the lease
	// this host's was sent (its claim, or a renewal), heldSince when the
	// current unbroken hold began (the claim, or a renewal that found the
	// lease gone and took it again). procSince is when the current process
	// was started, in the same time. See holdBroken.
	heldAt, heldSince, procSince time.Time
}

// exitSeen is an exit whose verdict (crash or not) is put off: what the
// verdict needs of the moment it happened.
type exitSeen struct {
	pid, code          int
	sig, reason, cause string
	at                 time.Time // when it was seen (the crash's time)
	healthySince       time.Time // the process was healthy since then (zero: it was not)
}

type killCause struct {
	code          int
	reason, cause string
}

// stopReq is a stop in flight.
type stopReq struct {
	reason string
	held   bool
	killed bool    // SIGKILL after stop_timeout
	then   []later // run once the process has exited and its stop is written
}

// later is what waits for a stop to end: f gets nil once the stop is
// recorded by this host, or the error to answer (the slot was fenced, the
// supervisor stopped). restart marks a queued operator restart, which a
// later operator stop supersedes.
type later struct {
	f       func(error)
	restart bool
}

// holds reports whether w's slot lease is this host's to renew.
func (w *worker) holds() bool { return w.state != stFenced && w.state != stGone }

// leaving reports whether w's slot is on its way to another host.
func (w *worker) leaving() bool {
	return w.state == stReleasing || w.state == stFenced || w.state == stGone
}

func (s *Supervisor) logw(w *worker) *slog.Logger {
	return s.log.With(slog.String("component", w.id.String()))
}

// ids lists the components this host holds, sorted.
func (s *Supervisor) ids() []health.ComponentID {
	ids := make([]health.ComponentID, 0, len(s.workers))
	for id := range s.workers {
		ids = append(ids, id)
	}
	health.SortIDs(ids)
	return ids
}

// runThens answers what waited for a stop.
func runThens(ls []later, err error) {
	for _, l := range ls {
		l.f(err)
	}
}
