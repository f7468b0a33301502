package explore

import (
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/vigil-dev/vigil/health"
)

// runSchedule applies the plan's steps at their times, the job stream
// alongside, and returns once the fault phase and every fault's own
// duration are over (or the seed was stopped).
func (w *world) runSchedule(stop <-chan struct{}) {
	start := time.Now()
	w.bg.Add(1)
	go func() {
		defer w.bg.Done()
		w.runJobs(start, stop)
	}()
	for _, s := range w.plan.Steps {
		select {
		case <-stop:
			return
		case <-time.After(time.Until(start.Add(s.At))):
		}
		w.apply(s)
	}
	select {
	case <-stop:
	case <-time.After(time.Until(start.Add(w.plan.End()))):
	}
}

// later runs fn after d, or at once when the faults end (heal), in the
// background; the world waits for it before settling.
func (w *world) later(d time.Duration, fn func()) {
	w.ends.Add(1)
	go func() {
		defer w.ends.Done()
		select {
		case <-time.After(d):
		case <-w.healing:
		}
		fn()
	}()
}

// target finds the live process of the step's slot: the one on the host
// holding its lease if there are several.
func (w *world) target(s Step) (proc, string, bool) {
	comp := health.ComponentID{Queue: s.Queue, Slot: s.Slot}.String()
	snap := w.look(false)
	for _, ps := range snap.sup {
		for _, p := range ps {
			if p.comp == comp {
				return p, comp, true
			}
		}
	}
	return proc{}, comp, false
}

// signal sends sig to the step's worker, noting a crash of its slot.
func (w *world) signal(s Step, sig syscall.Signal, what string) {
	p, comp, ok := w.target(s)
	if !ok {
		w.b.logf("%s %s: no live process", s.Kind, comp)
		return
	}
	if err := syscall.Kill(p.pid, sig); err != nil {
		w.b.logf("%s %s pid %d: %v", s.Kind, comp, p.pid, err)
		return
	}
	w.b.crashed(comp, p.pid)
	w.b.count(s.Kind)
	w.b.logf("%s %s pid %d on %s (%s)", s.Kind, comp, p.pid, p.host, what)
	if s.Kind == WorkerStop && s.Dur > 0 {
		w.later(s.Dur, func() {
			if _, _, st, ok := stat(p.pid); ok && st == p.start {
				_ = syscall.Kill(p.pid, syscall.SIGCONT)
				w.b.logf("worker-stop %s pid %d continued", comp, p.pid)
			}
		})
	}
}

// apply carries out one step.
func (w *world) apply(s Step) {
	switch s.Kind {
	case WorkerKill:
		w.signal(s, syscall.SIGKILL, "SIGKILL")
	case WorkerStop:
		w.signal(s, syscall.SIGSTOP, "SIGSTOP")
	case WorkerExit0:
		w.signal(s, syscall.SIGUSR1, "told to exit 0")
	case WorkerExit7:
		w.signal(s, syscall.SIGUSR2, "told to exit 7")
	case JobCrash, JobHang, JobFail:
		typ := strings.TrimPrefix(string(s.Kind), "job-")
		w.enqueue(Job{Queue: s.Queue, Type: typ})
		w.b.count(s.Kind)
		w.b.logf("%s job enqueued on %s", typ, s.Queue)
	case HostKill:
		w.hostKill(s)
	case HostStop:
		w.hostStop(s)
	case HostNew:
		h := w.hosts[s.Host]
		w.b.count(s.Kind)
		w.b.logf("host-new %s", h.id)
		w.bg.Add(1)
		go func() {
			defer w.bg.Done()
			w.restartHost(h, "host-new")
		}()
	case RedisOutage:
		win := w.b.open("", "redis outage")
		w.cutOff(nil, +1)
		w.b.count(s.Kind)
		w.b.logf("redis-outage: every connection cut and refused for %s", s.Dur)
		w.later(s.Dur, func() {
			w.cutOff(nil, -1)
			w.b.close(win)
			w.b.logf("redis-outage over")
		})
	case Failover:
		w.failover(s)
	case RedisPause:
		if _, ok := w.be.(topology); ok {
			w.freeze(s)
			return
		}
		win := w.b.open("", "redis paused")
		w.pause(+1)
		w.b.count(s.Kind)
		w.b.logf("redis-pause for %s", s.Dur)
		w.later(s.Dur, func() {
			w.pause(-1)
			w.b.close(win)
			w.b.logf("redis-pause over")
		})
	case RedisRestart, RedisLoss:
		w.redisRestart(s)
	case Partition:
		h := w.hosts[s.Host]
		win := w.b.open(h.id, "partition")
		w.cutOff(h, +1)
		w.b.count(s.Kind)
		w.b.logf("partition: %s cut from Redis for %s", h.id, s.Dur)
		w.later(s.Dur, func() {
			w.cutOff(h, -1)
			w.b.close(win)
			w.b.logf("partition of %s over", h.id)
		})
	case LostReply:
		w.lostReply(s)
	case OpStop, OpRestart, OpReset, OpRolling:
		w.hostAction(s)
	default:
		w.clusterAction(s)
	}
}

// cutOff refuses and cuts h's connections to Redis (every host's for
// nil), counting: overlapping faults end independently.
func (w *world) cutOff(h *host, delta int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, x := range w.hosts {
		if h != nil && x != h || x.proxy == nil {
			continue
		}
		x.refused += delta
		x.proxy.Refuse(x.refused > 0)
		if delta > 0 {
			x.proxy.Cut()
		}
	}
}

// pause pauses the server (redis-server: SIGSTOP), or stalls every proxy
// (miniredis cannot pause), counting.
func (w *world) pause(delta int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.paused += delta
	on := w.paused > 0
	if ok, _ := w.be.Pause(on); ok {
		return
	}
	for _, x := range w.hosts {
		x.proxy.Stall(on)
	}
}

func (w *world) hostKill(s Step) {
	h := w.hosts[s.Host]
	p := h.current()
	if p == nil {
		w.b.logf("host-kill %s: down already", h.id)
		return
	}
	win := w.b.open(h.id, whyKilled)
	h.mu.Lock()
	if h.proc != p {
		h.mu.Unlock()
		w.b.logf("host-kill %s: down already", h.id)
		w.b.close(win)
		return
	}
	h.proc = nil
	h.mu.Unlock()
	killed := time.Now()
	p.kill()
	// The host is down for s.Dur from its SIGKILL, not from its reaping: on
	// a loaded machine the supervisor's exit may take half a second to be
	// reaped, which would push the next instance, the only one that can
	// kill the previous instance's frozen worker, past invariant 2's limit.
	// A reap that slow is the machine's (load.reap flags the seed
	// overloaded).
	reaped := time.Since(killed)
	w.load.reap(reaped)
	w.b.count(s.Kind)
	w.b.logf("host-kill %s: supervisor pid %d SIGKILLed, reaped in %s; back after %s", h.id, p.pid, reaped.Round(time.Millisecond), s.Dur)
	w.bg.Add(1)
	go func() {
		defer w.bg.Done()
		select {
		case <-time.After(s.Dur - time.Since(killed)):
		case <-w.healing:
		}
		w.restartHost(h, "after host-kill")
		w.b.close(win)
	}()
}

func (w *world) hostStop(s Step) {
	h := w.hosts[s.Host]
	p := h.take()
	if p == nil {
		w.b.logf("host-stop %s: down already", h.id)
		return
	}
	win := w.b.open(h.id, whyStopped)
	w.b.count(s.Kind)
	w.b.logf("host-stop %s: graceful shutdown of pid %d", h.id, p.pid)
	w.bg.Add(1)
	go func() {
		defer w.bg.Done()
		w.shutdownHost(h, p, "host-stop")
		select {
		case <-time.After(s.Dur):
		case <-w.healing:
		}
		w.restartHost(h, "after host-stop")
		w.b.close(win)
	}()
}

// shutdownHost stops h's process gracefully and checks invariants 6 and 8
// on it: Stop's time, what it left behind.
func (w *world) shutdownHost(h *host, p *hostProc, why string) {
	began := time.Now()
	kids := map[int]bool{} // its children now: Stop must leave none of them
	for _, c := range children(p.pid) {
		kids[c] = true
	}
	// On a loaded machine a worker may exit seconds after its last line,
	// held in the kernel. Past the moment they must all be gone, say where
	// each one still is.
	watch := time.AfterFunc(StopTimeout+time.Second, func() {
		var where []string
		for _, pid := range append([]int{p.pid}, sortedKeys(kids)...) {
			where = append(where, procWhere(pid))
		}
		w.b.logf("%s %s: Stop not returned after %s; host and workers: %s; tasks in D on the machine: %s",
			why, h.id, StopTimeout+time.Second, strings.Join(where, ", "), blockedTasks(12))
	})
	m, err := p.shutdown(StopTimeout + 2*time.Second)
	watch.Stop()
	h.mu.Lock()
	if h.stopping == p {
		h.stopping = nil
	}
	h.mu.Unlock()
	if err != nil {
		w.violate(6, "%s %s: %v", why, h.id, err)
		return
	}
	limit := StopTimeout + 2*time.Second
	switch {
	case m.Err != "":
		w.violate(6, "%s %s: Stop returned %q after %s", why, h.id, m.Err, m.Took.Round(time.Millisecond))
	case m.Took > limit && !w.b.disturbed(h.id, began, time.Now(), 0):
		w.violate(6, "%s %s: Stop took %s (limit %s)", why, h.id, m.Took.Round(time.Millisecond), limit)
	}
	if m.Unanswered > 0 {
		w.violate(6, "%s %s: operator actions still unanswered %s after Stop returned", why, h.id, StopTimeout+2*time.Second)
	}
	if m.Leaks != "" {
		w.violate(8, "%s %s: goroutines left after Stop: %s", why, h.id, m.Leaks)
	}
	var left []proc
	for _, o := range w.orphans() {
		if o.alive() && kids[o.pid] {
			left = append(left, o)
		}
	}
	if len(left) > 0 {
		w.violate(6, "%s %s: Stop returned leaving %s", why, h.id, describeProcs(left))
	}
	w.b.logf("%s %s: stopped in %s", why, h.id, m.Took.Round(time.Millisecond))
}

func (w *world) redisRestart(s Step) {
	keep := s.Kind == RedisRestart
	w.b.count(s.Kind)
	if s.Kind == RedisLoss && !s.Flag {
		w.b.blip("", "redis data lost")
		err := w.be.Flush()
		w.jobs.lost(time.Now()) // an enqueue that began before this moment may be gone
		if err != nil {
			w.b.logf("redis-loss: FLUSHALL: %v", err)
			return
		}
		w.resetSizes()
		w.b.logf("redis-loss: FLUSHALL (no connection closed)")
		return
	}
	win := w.b.open("", "redis restart")
	done, err := w.be.Restart(keep)
	if !done { // as its clients see a restart: connections cut, refused a moment
		w.cutOff(nil, +1)
		if !keep {
			err = w.be.Flush()
		}
		time.Sleep(100 * time.Millisecond)
		w.cutOff(nil, -1)
	}
	if !keep {
		w.jobs.lost(time.Now())
	}
	w.b.close(win)
	if !keep {
		w.resetSizes()
	}
	w.b.logf("%s: server restarted (data kept: %v), err=%v", s.Kind, keep, err)
}

// resetSizes follows a data loss: the hosts write their configured pool
// sizes again.
func (w *world) resetSizes() {
	w.mu.Lock()
	for _, p := range w.p.Pools {
		w.sizes[p.Queue] = p.Workers
	}
	w.mu.Unlock()
}

func (w *world) lostReply(s Step) {
	h := w.hosts[s.Host]
	var match func([]string) bool
	switch s.Match {
	case MatchLease:
		match = scriptOn(w.pfx + "slot:")
	case MatchRecord:
		match = scriptOn(w.pfx + "component:")
	default:
		match = scriptOn("asynq:{")
	}
	win := w.b.open(h.id, "lost reply armed")
	dropped := h.proxy.DropReply(match)
	w.b.count(s.Kind)
	w.b.logf("lost-reply armed on %s for its next %s script call", h.id, s.Match)
	w.ends.Add(1)
	go func() {
		defer w.ends.Done()
		select {
		case <-dropped:
			w.b.logf("lost-reply on %s: a %s call ran, its reply lost", h.id, s.Match)
		case <-w.healing:
			h.proxy.DropReply(nil)
		}
		w.b.close(win)
	}()
}

// scriptOn matches EVAL/EVALSHA calls whose first key starts with prefix.
func scriptOn(prefix string) func([]string) bool {
	return func(args []string) bool {
		if len(args) < 4 {
			return false
		}
		cmd := strings.ToUpper(args[0])
		if cmd != "EVALSHA" && cmd != "EVAL" {
			return false
		}
		n, err := strconv.Atoi(args[2])
		return err == nil && n > 0 && strings.HasPrefix(args[3], prefix)
	}
}
