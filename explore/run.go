package explore

import (
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strings"
	"time"
)

// Options configure the explorer.
type Options struct {
	Backend string    // one of Backends, or BackendMixed
	Verbose bool      // print each seed's schedule log as it runs
	Out     io.Writer // reports
	LogDir  string    // parent of each seed's log folder ("" = the temp dir)
	Keep    bool      // keep every seed's logs, not only a failing one's
	// Only, if set, keeps just these steps of the seed's schedule (by
	// index): a shrunk schedule (Minimize).
	Only []int
	// HostEnv is added to every host process's environment (tests).
	HostEnv []string
}

// Result is one seed's outcome.
type Result struct {
	Seed       uint64
	Backend    string
	Params     Params
	Steps      []Step // the plan's
	Violations []Violation
	Log        string // the schedule log
	Faults     map[Kind]int
	Jobs       JobStats
	Ticks      TickStats
	Took       time.Duration
	LogDir     string      // kept when the seed failed
	Phases     string      // how long each phase took
	PhaseTimes []PhaseTime // the same, for the summary
	Overloaded bool        // the machine was too busy for the timings (see loadMeter)
	Load       string
}

// PhaseTime is how long one phase of a seed took.
type PhaseTime struct {
	Name string
	Took time.Duration
}

// Failed reports whether the seed broke an invariant.
func (r Result) Failed() bool { return len(r.Violations) > 0 }

// Report is what a failing seed prints: the seed, the schedule so far,
// each invariant broken and its evidence, and how to replay it.
func (r Result) Report() string {
	var b strings.Builder
	fmt.Fprintf(&b, "=== seed %d FAILED (%s, %s)\n%s\n--- plan\n", r.Seed, r.Backend, r.Took.Round(time.Millisecond), r.Params)
	for i, s := range r.Steps {
		fmt.Fprintf(&b, "  [%d] %s\n", i, s)
	}
	fmt.Fprintf(&b, "--- schedule as it ran\n%s\n--- violations\n", r.Log)
	for _, v := range r.Violations {
		fmt.Fprintf(&b, "  %s\n", v)
	}
	if r.Overloaded {
		fmt.Fprintf(&b, "--- the machine was overloaded: %s\n", r.Load)
	}
	fmt.Fprintf(&b, "--- logs of the hosts and workers: %s\n--- replay: make explore SEED=%d REDIS=%s\n", r.LogDir, r.Seed, r.Backend)
	return b.String()
}

// RunSeed runs one seed from start to end.
func RunSeed(seed uint64, opts Options, sh *Shared) Result {
	plan := Draw(seed, opts.Backend)
	if opts.Only != nil {
		plan = plan.Only(opts.Only)
	}
	res := Result{Seed: seed, Backend: plan.Params.Backend, Params: plan.Params, Steps: plan.Steps}
	began := time.Now()
	w, err := newWorld(plan, opts, sh)
	if err != nil {
		res.Violations = []Violation{{Invariant: 0, Evidence: err.Error()}}
		return res
	}
	stopSampler := make(chan struct{})
	samplerDone := make(chan struct{})
	var phases []string
	mark := time.Now()
	phase := func(name string) {
		took := time.Since(mark)
		phases = append(phases, fmt.Sprintf("%s %.1fs", name, took.Seconds()))
		res.PhaseTimes = append(res.PhaseTimes, PhaseTime{name, took})
		mark = time.Now()
	}
	func() {
		defer w.teardown()
		if err := w.setup(); err != nil {
			w.violate(0, "%v", err)
			return
		}
		phase("setup")
		w.b.t0 = time.Now()
		w.b.logf("%s", plan.Params)
		go func() {
			defer close(samplerDone)
			w.sampler(stopSampler)
		}()
		defer func() {
			select {
			case <-stopSampler:
			default:
				close(stopSampler)
			}
			<-samplerDone
		}()
		w.runSchedule(w.done)
		phase("faults")
		w.heal()
		phase("heal")
		v, err := w.readLedger()
		if err != nil {
			w.violate(0, "read the ledger: %v", err)
			return
		}
		w.settle(v)
		phase("settle")
		w.revive()
		if budget := w.jobsBudget(); !w.waitJobs(budget, jobsStall) {
			w.b.logf("jobs still not done after the faults ended: their budget %s, and past it while they progressed (up to twice it)", budget)
		}
		w.waitActions(StopTimeout + 2*time.Second)
		if res.Jobs, err = w.judgeJobs(w.readLedger); err != nil {
			w.violate(0, "read the ledger: %v", err)
			return
		}
		res.Ticks = w.judgeSchedules()
		phase("jobs")
		close(stopSampler)
		<-samplerDone
		endLag := w.meterLag() // the stops are timed (invariant 6): so is the machine meanwhile
		w.stopAll()
		endLag()
		w.checkRaces()
		phase("stop")
		w.b.logf("seed over: %d jobs (%d completed, %d archived, %d deleted, %d lost with Redis's data, %d run twice)",
			res.Jobs.Enqueued, res.Jobs.Completed, res.Jobs.Archived, res.Jobs.Deleted, res.Jobs.LostToDataLoss, res.Jobs.Duplicates)
	}()
	phase("teardown")
	res.Phases = strings.Join(phases, ", ")
	res.Overloaded, res.Load = w.load.overloaded()
	res.Violations = w.v.all()
	res.Log = w.b.log()
	res.Faults = w.b.stats
	res.Took = time.Since(began)
	if res.Failed() || opts.Keep {
		res.LogDir = w.dir
	} else {
		os.RemoveAll(w.dir)
	}
	return res
}

// Summary adds up many seeds' results.
type Summary struct {
	Seeds, Failed int
	Overloaded    int // seeds run on an overloaded machine (see loadMeter)
	Inconclusive  []uint64
	Faults        map[Kind]int
	Jobs          JobStats
	Ticks         TickStats
	Took          time.Duration // the seeds' own time, added
	FailedSeeds   []uint64
	ByInvariant   map[int]int
	ByBackend     map[string]int // seeds run on each Redis
	Phases        []PhaseTime    // each phase's time, added over the seeds, in the order first seen
}

// Add counts one result.
func (s *Summary) Add(r Result) {
	if s.Faults == nil {
		s.Faults, s.ByInvariant, s.ByBackend = map[Kind]int{}, map[int]int{}, map[string]int{}
	}
	s.Seeds++
	s.ByBackend[r.Backend]++
	s.Took += r.Took
	for _, p := range r.PhaseTimes {
		i := slices.IndexFunc(s.Phases, func(q PhaseTime) bool { return q.Name == p.Name })
		if i < 0 {
			s.Phases = append(s.Phases, PhaseTime{Name: p.Name})
			i = len(s.Phases) - 1
		}
		s.Phases[i].Took += p.Took
	}
	if r.Overloaded {
		s.Overloaded++
	}
	for k, n := range r.Faults {
		s.Faults[k] += n
	}
	s.Jobs.Enqueued += r.Jobs.Enqueued
	s.Jobs.Completed += r.Jobs.Completed
	s.Jobs.Archived += r.Jobs.Archived
	s.Jobs.Deleted += r.Jobs.Deleted
	s.Jobs.LostToDataLoss += r.Jobs.LostToDataLoss
	s.Jobs.Duplicates += r.Jobs.Duplicates
	s.Jobs.Refused += r.Jobs.Refused
	s.Jobs.Unrecorded += r.Jobs.Unrecorded
	s.Jobs.AwaitingLease += r.Jobs.AwaitingLease
	s.Jobs.ToxicUnseen += r.Jobs.ToxicUnseen
	s.Jobs.CancelledUnrun += r.Jobs.CancelledUnrun
	s.Ticks.Fired += r.Ticks.Fired
	s.Ticks.Twice += r.Ticks.Twice
	s.Ticks.Gaps += r.Ticks.Gaps
	if r.Failed() {
		s.Failed++
		s.FailedSeeds = append(s.FailedSeeds, r.Seed)
		seen := map[int]bool{}
		for _, v := range r.Violations {
			if !seen[v.Invariant] {
				seen[v.Invariant] = true
				s.ByInvariant[v.Invariant]++
			}
		}
	}
}

// String is the summary in a few lines.
func (s Summary) String() string {
	var kinds []string
	for k, n := range s.Faults {
		kinds = append(kinds, fmt.Sprintf("%s %d", k, n))
	}
	sort.Strings(kinds)
	var inv []string
	for i, n := range s.ByInvariant {
		inv = append(inv, fmt.Sprintf("inv%d: %d", i, n))
	}
	sort.Strings(inv)
	var on []string
	for _, b := range Backends {
		if n := s.ByBackend[b]; n > 0 || b == BackendMini || b == BackendReal {
			on = append(on, fmt.Sprintf("%d on %s", n, b))
		}
	}
	var phases []string
	for _, p := range s.Phases {
		phases = append(phases, fmt.Sprintf("%s %.2fs", p.Name, p.Took.Seconds()/float64(max(1, s.Seeds))))
	}
	return fmt.Sprintf("seeds %d (%s; %d on an overloaded machine), failed %d %v, inconclusive (failed only when overloaded) %v\nmean phases of a seed: %s\nfaults injected: %s\njobs: %d enqueued (%d refused by Redis), %d completed, %d archived, %d deleted, %d lost with Redis's data, %d run twice (at least once), %d done but still active in asynq, %d left to asynq's lease recovery, %d archived toxic before their handler wrote a line, %d cancelled before their handler began\nschedule: %d ticks enqueued, %d twice, %d missing\nfailing seeds: %v",
		s.Seeds, strings.Join(on, ", "), s.Overloaded, s.Failed, inv, s.Inconclusive, strings.Join(phases, ", "), strings.Join(kinds, ", "), s.Jobs.Enqueued, s.Jobs.Refused, s.Jobs.Completed, s.Jobs.Archived,
		s.Jobs.Deleted, s.Jobs.LostToDataLoss, s.Jobs.Duplicates, s.Jobs.Unrecorded, s.Jobs.AwaitingLease, s.Jobs.ToxicUnseen, s.Jobs.CancelledUnrun, s.Ticks.Fired, s.Ticks.Twice, s.Ticks.Gaps, s.FailedSeeds)
}
