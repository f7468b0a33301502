package chaos_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/health"
)

// outageKind is how Redis goes away in scenario 5.
type outageKind int

const (
	restartKeep outageKind = iota // SHUTDOWN SAVE, start again at once
	restartLose                   // killed, started again empty
	downKeep                      // SHUTDOWN SAVE, down for outageLength, start again
)

// The three run in parallel (each has its own redis-servers and host):
// most of their time is waiting for wall time to pass.
func TestRedisRestartKeepingData(t *testing.T) { t.Parallel(); redisOutage(t, restartKeep) }
func TestRedisRestartLosingData(t *testing.T)  { t.Parallel(); redisOutage(t, restartLose) }
func TestRedisDown(t *testing.T)               { t.Parallel(); redisOutage(t, downKeep) }

// redisOutage is scenario 5. A host runs a pool with jobs flowing and a
// second pool whose queue is paused with jobs waiting; one worker has a
// restart history. Redis goes away (kind says how), for longer than a
// heartbeat TTL, and comes back. No worker is killed or restarted and
// nothing is counted; the event stream carries on; no live host is
// announced lost. With the data kept, every job completes and the pauses
// hold (the paused jobs run once resumed); with the data lost, the records
// and restart history are written again from the live processes, and
// every job enqueued after the restart completes (those that lived only in
// that Redis are gone).
//
// The full-size run takes Redis away with jobs in flight; in TestRedisDown
// two of them are long enough to finish during the outage after their
// asynq lease would have run out. Every job must run once: a completion asynq cannot write while
// Redis is away is kept by the worker and written when it is back, a task
// whose dequeue answer was lost is put back by the worker at once, and a
// lease is not let run out while its handler runs (queue/kept.go,
// settle.go, leases.go). The short variant (CI) pauses everything and lets
// the running jobs finish before the outage, which keeps it within
// seconds.
func redisOutage(t *testing.T, kind outageKind) {
	inFlight := need(t, modeShort) == modeLong
	const work, held = "work", "held"
	const workers = 4
	r := newRig(t, work, held)
	// With Redis down for a while (at full size), two long jobs start first
	// and end during the outage, past the 30 s lease asynq gives a task.
	var long time.Duration
	if inFlight && kind == downKeep {
		long = outageLength(t)*3/4 + 5*time.Second
	}
	spec := r.spec("h1", poolSpec{Queue: work, Workers: workers, TaskTimeout: max(time.Minute, long+30*time.Second)},
		poolSpec{Queue: held, Workers: 1})
	spec.Interval, spec.TTL = 200*time.Millisecond, time.Second
	spec.Policy = noLimits
	h := startHost(t, spec)
	all := append(slots(work, workers), slots(held, 1)...)
	before := r.waitHealthy(all, 30*time.Second)
	// A client of the event stream, as a browser's, there through the outage.
	sse := readEvents(t, h, "")

	// A restart history for Redis to keep, or lose and get back.
	killed := map[int]bool{before[0].PID: true}
	sigkill(t, before[0].PID)
	before = r.waitHealthy(all, 30*time.Second, killed)
	if lifetime(before) != 1 {
		t.Fatalf("one kill, %d restarts counted: %s", lifetime(before), describe(before))
	}
	h.must(http.MethodPost, "/api/v1/queues/"+held+"/pause", nil, http.StatusOK, nil)
	heldJobs := r.enqueue(held, 20, 10, 20)
	var jobs []string
	if long > 0 {
		ms := int(long.Milliseconds())
		jobs = r.enqueue(work, 2, ms, ms)
	}
	jobs = append(jobs, r.enqueue(work, pick(80, 400), pick(20, 50), pick(80, 150))...)
	if !r.events.wait(30*time.Second, 20*time.Millisecond, func() bool { return r.ledger.done() >= 20 }) {
		t.Fatalf("no job completed")
	}
	if !inFlight {
		h.must(http.MethodPost, "/api/v1/pause", nil, http.StatusOK, nil)
		if !r.events.wait(30*time.Second, 50*time.Millisecond, func() bool {
			info, err := r.insp.GetQueueInfo(work)
			return err == nil && info.Active == 0 && len(r.ledger.owners()) == 0
		}) {
			t.Fatal("jobs still running 30 s after the global pause")
		}
	}
	outageStart := len(r.events.all())
	down := time.Now()
	var late *sseReader // an event client that comes during the outage
	switch kind {
	case restartKeep:
		r.redis.restartKeepingData(t, 0, nil)
	case restartLose:
		r.redis.restartLosingData(t)
	case downKeep:
		r.redis.restartKeepingData(t, outageLength(t), func() { late = readEvents(t, h, "") })
	}
	back := time.Now()
	t.Logf("Redis away %s", back.Sub(down).Round(time.Millisecond))

	// No worker is judged hung during a TTL of grace and one more (wall
	// time is the input here).
	<-time.After(time.Until(back.Add(2*spec.TTL + spec.TTL/2)))
	after := r.waitHealthy(all, 30*time.Second)
	for i, c := range after {
		b := before[i]
		if c.PID != b.PID || !running(c.PID) {
			t.Errorf("%s: pid %d → %d (running %v): a worker was replaced", c.ID, b.PID, c.PID, running(c.PID))
		}
		if c.Restarts.LifetimeRestarts != b.Restarts.LifetimeRestarts || c.Restarts.RestartCount != b.Restarts.RestartCount {
			t.Errorf("%s: restarts %d/%d → %d/%d", c.ID, b.Restarts.RestartCount, b.Restarts.LifetimeRestarts,
				c.Restarts.RestartCount, c.Restarts.LifetimeRestarts)
		}
		if c.Host != "h1" || c.Instance != b.Instance {
			t.Errorf("%s: host %q instance %q, want h1 %q", c.ID, c.Host, c.Instance, b.Instance)
		}
	}
	for _, e := range r.events.all()[outageStart:] {
		if w := e.ev.Worker; w != nil && w.Status != string(health.StatusHealthy) && w.Status != string(health.StatusStarting) {
			t.Errorf("worker event since the outage: %+v", *w)
		}
	}
	for _, e := range r.events.all() {
		if e.ev.Type == health.EventHost && strings.Contains(string(e.ev.Data), `"lost"`) {
			t.Errorf("a live host was announced lost: %s %s", e.ev.Topic, e.ev.Data)
		}
	}

	gone := 0
	if kind == restartLose {
		// The jobs that lived only in that Redis are gone, and so are the
		// pause flags: count them, then check that the system works on
		// from its config.
		comp := r.ledger.completions()
		for _, id := range jobs {
			if comp[id] == 0 {
				gone++
			}
		}
		gone += len(heldJobs)
		jobs, heldJobs = r.enqueue(work, 100, 20, 60), r.enqueue(held, 10, 10, 20)
		r.waitDone(append(jobs, heldJobs...), 60*time.Second)
		r.waitAsynqSettled(work, len(jobs), 30*time.Second)
		r.waitAsynqSettled(held, len(heldJobs), 30*time.Second)
	} else {
		var st struct {
			Paused bool `json:"paused"`
		}
		h.must(http.MethodGet, "/api/v1/queues/"+held, nil, http.StatusOK, &st)
		if info, err := r.insp.GetQueueInfo(held); err != nil || !st.Paused || !info.Paused || info.Pending != len(heldJobs) {
			t.Errorf("queue %s after the outage: paused %v, asynq %+v %v", held, st.Paused, info, err)
		}
		if !inFlight {
			var all struct {
				GlobalPaused bool `json:"global_paused"`
			}
			h.must(http.MethodGet, "/api/v1/queues", nil, http.StatusOK, &all)
			if !all.GlobalPaused {
				t.Errorf("global pause lost in the outage")
			}
			h.must(http.MethodPost, "/api/v1/resume", nil, http.StatusOK, nil)
		}
		r.waitDone(jobs, pick(60*time.Second, 2*time.Minute))
		t.Logf("every job done %s after Redis came back", time.Since(back).Round(time.Millisecond))
		comp := r.ledger.completions()
		for _, id := range heldJobs {
			if comp[id] > 0 {
				t.Errorf("job %s of the paused queue %s ran", id, held)
			}
		}
		h.must(http.MethodPost, "/api/v1/queues/"+held+"/resume", nil, http.StatusOK, nil)
		r.waitDone(heldJobs, 30*time.Second)
		// asynq's own books: every task completed, none left active.
		r.waitAsynqSettled(work, len(jobs), pick(30*time.Second, time.Minute))
		r.waitAsynqSettled(held, len(heldJobs), 30*time.Second)
	}

	since := 0
	for _, e := range r.events.all() {
		if e.at.After(back) {
			since++
		}
	}
	if since == 0 {
		t.Errorf("no event on the stream since Redis came back")
	}
	delivered := sse.since(back)
	if delivered == 0 {
		n, refused := sse.resumed()
		t.Errorf("the event client got no message since Redis came back (%d resumes, %d refused)", n, refused)
	}
	if late != nil && late.since(back) == 0 {
		n, refused := late.resumed()
		t.Errorf("the event client that came during the outage got no message since Redis came back (%d resumes, %d refused)", n, refused)
	}
	if v := r.ledger.violations(); len(v) > 0 {
		t.Errorf("tasks ran in two handlers at once: %v", v)
	}
	tl := r.ledger.judge(append(jobs, heldJobs...), killed, nil)
	if tl.lost > 0 {
		t.Errorf("%d jobs lost", tl.lost)
	}
	for _, u := range tl.unexplained {
		t.Errorf("repeated completion: %s", u)
	}
	// No handler ran a job twice (one cut short by asynq when its lease ran
	// out would complete once but run twice), and asynq archived none.
	reran := 0
	for id, n := range r.ledger.runs() {
		if n > 1 {
			reran++
			t.Errorf("job %s ran %d times", id, n)
		}
	}
	archived := r.archivedUnrun(r.ledger.runs(), work, held)
	resumes, refused := sse.resumed()
	unrecorded := h.log.count("Will retry syncing")
	h.term(spec.StopTimeout + 5*time.Second)
	result(t, "away=%s in_flight=%v workers_killed=0 restarts_counted=0 jobs=%d lost=%d duplicated=%d ran_twice=%d archived=%d (unrun %d) asynq_unrecorded_completions=%d outcomes_kept=%d stranded_requeued=%d gone_with_the_data=%d events_since=%d delivered_to_an_sse_client_since=%d (resumes %d, refused %d)",
		back.Sub(down).Round(time.Millisecond), inFlight, tl.jobs, tl.lost, tl.duplicated, reran, archived.all, archived.unrun,
		unrecorded, h.log.count("task outcome kept"), h.log.count("requeued a task stranded"), gone, since, delivered, resumes, refused)
}
