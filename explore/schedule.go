package explore

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"time"
)

// Kind is one entry of the fault menu.
type Kind string

// The fault menu. Worker and job faults target a slot, host
// faults a host, operator actions act from a host; Dur is how long a fault
// lasts (0 for a one-off).
const (
	WorkerKill  Kind = "worker-kill"  // SIGKILL
	WorkerStop  Kind = "worker-stop"  // SIGSTOP (a hang); SIGCONT after Dur unless Dur is 0
	WorkerExit0 Kind = "worker-exit0" // the worker exits 0 on its own (SIGUSR1)
	WorkerExit7 Kind = "worker-exit7" // the worker exits 7 on its own (SIGUSR2)
	JobCrash    Kind = "job-crash"    // a job that exits its worker (toxic)
	JobHang     Kind = "job-hang"     // a job whose handler never returns
	JobFail     Kind = "job-fail"     // a job whose handler returns an error

	HostKill Kind = "host-kill" // SIGKILL the supervisor; start it again (same id) after Dur
	HostStop Kind = "host-stop" // graceful shutdown; start it again after Dur
	HostNew  Kind = "host-new"  // a new host joins

	RedisOutage  Kind = "redis-outage"  // every connection cut and refused for Dur
	RedisPause   Kind = "redis-pause"   // the server answers nothing for Dur
	RedisRestart Kind = "redis-restart" // the server restarts with its data
	RedisLoss    Kind = "redis-loss"    // the data is lost: FLUSHALL (no failed call), or an empty restart (Flag)
	Partition    Kind = "partition"     // one host cut from Redis for Dur, the others go on
	LostReply    Kind = "lost-reply"    // one host's next Match command runs, its reply is lost
	// Failover fails a replicated Redis over (-redis sentinel, cluster):
	// the master of shard N is SIGKILLed (Flag) and started again as a
	// replica Dur after its replica took over, or a manual failover
	// (SENTINEL FAILOVER, CLUSTER FAILOVER) swaps the two.
	Failover Kind = "failover"

	OpStop       Kind = "op-stop"        // Supervisor.StopComponent
	OpRestart    Kind = "op-restart"     // Supervisor.Restart
	OpReset      Kind = "op-reset"       // Supervisor.Reset (Flag: restart)
	OpPauseAll   Kind = "op-pause-all"   // queue.Control.PauseAll, ResumeAll after Dur
	OpPauseQueue Kind = "op-pause-queue" // queue.Control.PauseQueue, ResumeQueue after Dur
	OpDrain      Kind = "op-drain"       // supervisor.SetDrain on a host, cleared after Dur
	OpResize     Kind = "op-resize"      // supervisor.SetPoolSize(Queue, N)
	OpRolling    Kind = "op-rolling"     // Supervisor.RollingRestart
	OpJobRetry   Kind = "op-job-retry"   // asynq: run an archived task again
	OpJobDelete  Kind = "op-job-delete"  // asynq: delete a pending or archived task
	OpJobCancel  Kind = "op-job-cancel"  // asynq: cancel an active task
)

// What a LostReply loses: the reply to the next script call on one of
// these keys (lease renew and claim, component record writes), or to
// asynq's own calls.
const (
	MatchLease  = "lease"
	MatchRecord = "record"
	MatchAsynq  = "asynq"
)

// Step is one scheduled fault or action.
type Step struct {
	At    time.Duration
	Kind  Kind
	Queue string // worker, job and pool targets
	Slot  int
	Host  int // target host (host faults, drain) or acting host (operator actions)
	Dur   time.Duration
	N     int // pool size
	Flag  bool
	Match string
}

func (s Step) String() string {
	at := fmt.Sprintf("+%5.2fs ", s.At.Seconds())
	slot := fmt.Sprintf("%s:%d", s.Queue, s.Slot)
	dur := ""
	if s.Dur > 0 {
		dur = " for " + s.Dur.Round(10*time.Millisecond).String()
	}
	switch s.Kind {
	case WorkerKill, WorkerExit0, WorkerExit7:
		return at + string(s.Kind) + " " + slot
	case WorkerStop:
		if s.Dur == 0 {
			return at + "worker-stop " + slot + " (never continued)"
		}
		return at + "worker-stop " + slot + dur
	case JobCrash, JobHang, JobFail:
		return at + string(s.Kind) + " on " + s.Queue
	case HostKill, HostStop:
		return fmt.Sprintf("%s%s h%d, back after %s", at, s.Kind, s.Host, s.Dur.Round(10*time.Millisecond))
	case HostNew:
		return fmt.Sprintf("%shost-new h%d", at, s.Host)
	case RedisOutage:
		return at + string(s.Kind) + dur
	case RedisPause:
		if s.N > 0 {
			return fmt.Sprintf("%sredis-pause of shard %d's master%s", at, s.N, dur)
		}
		return at + string(s.Kind) + dur
	case RedisRestart:
		return at + "redis-restart (data kept)"
	case RedisLoss:
		if s.Flag {
			return at + "redis-loss (empty restart)"
		}
		return at + "redis-loss (FLUSHALL)"
	case Partition:
		return fmt.Sprintf("%spartition h%d%s", at, s.Host, dur)
	case LostReply:
		return fmt.Sprintf("%slost-reply h%d next %s call", at, s.Host, s.Match)
	case Failover:
		if s.Flag {
			return fmt.Sprintf("%sfailover: SIGKILL of shard %d's master, back as a replica %s after the switch", at, s.N, s.Dur.Round(10*time.Millisecond))
		}
		return fmt.Sprintf("%sfailover: manual, shard %d", at, s.N)
	case OpStop, OpRestart:
		return fmt.Sprintf("%s%s %s from h%d", at, s.Kind, slot, s.Host)
	case OpReset:
		return fmt.Sprintf("%sop-reset %s restart=%v from h%d", at, slot, s.Flag, s.Host)
	case OpPauseAll:
		return at + "op-pause-all" + dur
	case OpPauseQueue:
		return at + "op-pause-queue " + s.Queue + dur
	case OpDrain:
		return fmt.Sprintf("%sop-drain h%d%s", at, s.Host, dur)
	case OpResize:
		return fmt.Sprintf("%sop-resize %s to %d", at, s.Queue, s.N)
	case OpRolling:
		return fmt.Sprintf("%sop-rolling %s from h%d", at, s.Queue, s.Host)
	case OpJobRetry, OpJobDelete, OpJobCancel:
		return at + string(s.Kind) + " on " + s.Queue
	}
	return at + string(s.Kind)
}

// weighted is the fault menu with the odds of each entry.
var weighted = []struct {
	kind Kind
	w    int
}{
	{WorkerKill, 10}, {WorkerStop, 5}, {WorkerExit0, 3}, {WorkerExit7, 3},
	{JobCrash, 3}, {JobHang, 2}, {JobFail, 3},
	{HostKill, 4}, {HostStop, 3}, {HostNew, 2},
	{RedisOutage, 4}, {RedisPause, 3}, {RedisRestart, 2}, {RedisLoss, 2}, {Partition, 4}, {LostReply, 4},
	{OpStop, 4}, {OpRestart, 5}, {OpReset, 3}, {OpPauseAll, 2}, {OpPauseQueue, 2}, {OpDrain, 3},
	{OpResize, 4}, {OpRolling, 2}, {OpJobRetry, 2}, {OpJobDelete, 1}, {OpJobCancel, 2},
}

// weightedTopo is the menu on a replicated Redis (sentinel, cluster):
// the faults of a single server's proxies (outage, partition, lost reply)
// and its restarts are out; a pause freezes a master (SIGSTOP), a data
// loss is a FLUSHALL of every master, and failovers come in.
var weightedTopo = func() []struct {
	kind Kind
	w    int
} {
	out := []struct {
		kind Kind
		w    int
	}{}
	for _, e := range weighted {
		switch e.kind {
		case RedisOutage, RedisRestart, Partition, LostReply:
			continue
		}
		out = append(out, e)
	}
	return append(out, struct {
		kind Kind
		w    int
	}{Failover, 20})
}()

// menuFor is the fault menu of a backend.
func menuFor(backend string) []struct {
	kind Kind
	w    int
} {
	if topoBackend(backend) {
		return weightedTopo
	}
	return weighted
}

// Plan is a seed's world and schedule.
type Plan struct {
	Params Params
	Steps  []Step
	Jobs   []Job // the stream of ordinary jobs, enqueued all along
}

// Draw derives the plan of seed: every fault, target and timing comes from
// the seed alone.
func Draw(seed uint64, backend string) Plan {
	r := rand.New(rand.NewPCG(seed, 0x5eedf00d))
	p := drawParams(seed, backend, r)
	menu := menuFor(p.Backend)
	total := 0
	for _, e := range menu {
		total += e.w
	}
	n := 3 + r.IntN(7)
	hosts := p.Hosts
	steps := make([]Step, 0, n)
	for range n {
		x := r.IntN(total)
		var k Kind
		for _, e := range menu {
			if x < e.w {
				k = e.kind
				break
			}
			x -= e.w
		}
		pool := p.Pools[r.IntN(len(p.Pools))]
		s := Step{
			At:    200*time.Millisecond + time.Duration(r.Int64N(int64(p.Faults-200*time.Millisecond))),
			Kind:  k,
			Queue: pool.Queue,
			Slot:  r.IntN(pool.Workers + 1),
			Host:  r.IntN(hosts),
		}
		switch k {
		case WorkerStop:
			if r.IntN(3) > 0 {
				s.Dur = ms(r, 100, 1500)
			}
		case HostKill:
			s.Dur = ms(r, 0, 1500)
		case HostStop:
			s.Dur = ms(r, 200, 2000)
		case HostNew:
			if hosts >= 3 {
				s.Kind, s.Dur = HostKill, ms(r, 0, 1500)
			} else {
				s.Host = hosts
				hosts++
			}
		case RedisOutage:
			s.Dur = ms(r, 100, 2500)
			if r.IntN(25) == 0 { // now and then a long one: workers must wait for Redis
				s.Dur = ms(r, 5000, 20000)
			}
		case RedisPause:
			s.Dur = ms(r, 100, 2000)
			if topoBackend(p.Backend) {
				s.N = r.IntN(3) // the shard whose master freezes (a Cluster's)
			}
		case RedisLoss:
			s.Flag = r.IntN(2) == 0 && !topoBackend(p.Backend) // a topology's is a FLUSHALL
		case Failover:
			s.N, s.Flag = r.IntN(3), r.IntN(2) == 0
			if s.Flag {
				s.Dur = ms(r, 0, 2000)
			}
		case Partition:
			s.Dur = ms(r, 300, 3000)
		case LostReply:
			s.Match = []string{MatchLease, MatchRecord, MatchRecord, MatchAsynq}[r.IntN(4)]
		case OpReset:
			s.Flag = r.IntN(2) == 0
		case OpPauseAll, OpPauseQueue:
			s.Dur = ms(r, 100, 1500)
		case OpDrain:
			s.Dur = ms(r, 300, 2500)
		case OpResize:
			s.N = r.IntN(pool.Workers + 2)
		case OpJobRetry, OpJobDelete, OpJobCancel:
			s.N = r.IntN(1000) // which task of those listed then
		}
		steps = append(steps, s)
	}
	slices.SortStableFunc(steps, func(a, b Step) int { return int(a.At - b.At) })
	return Plan{Params: p, Steps: steps, Jobs: drawJobs(p, r.IntN)}
}

func ms(r *rand.Rand, lo, hi int) time.Duration {
	return time.Duration(lo+r.IntN(hi-lo+1)) * time.Millisecond
}

// End is when the plan's last fault ends by its own duration (at least
// the fault phase): a long outage runs its course.
func (p Plan) End() time.Duration {
	end := p.Params.Faults
	for _, s := range p.Steps {
		switch s.Kind {
		case WorkerStop, HostKill, HostStop, RedisOutage, RedisPause, Partition, OpPauseAll, OpPauseQueue, OpDrain, Failover:
			end = max(end, s.At+s.Dur)
		}
	}
	return end
}

// Only keeps the steps whose indexes are in keep (to shrink a failing
// schedule); the jobs stay.
func (p Plan) Only(keep []int) Plan {
	out := p
	out.Steps = nil
	for _, i := range keep {
		if i >= 0 && i < len(p.Steps) {
			out.Steps = append(out.Steps, p.Steps[i])
		}
	}
	return out
}
