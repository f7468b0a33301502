// Command explore runs the fault explorer (package explore): `make explore`.
//
//	explore [-seeds N] [-start S] [-seed S] [-budget D] [-redis miniredis|redis-server|sentinel|cluster|mixed] [-ports LO-HI] [-j N] [-replay FILE] [-record FILE] [-v]
//
// It first replays the seeds of the replay list, then runs seeds start,
// start+1, … until N have run or the budget is spent, j at a time, and
// prints a summary. A failing seed prints its schedule and evidence; -seed
// runs that one alone, verbose. It exits 1 when a seed not marked known in
// the replay list fails.
package main

import (
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/signal"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/vigil-dev/vigil/explore"
	"github.com/vigil-dev/vigil/internal/redisconn"
)

func main() {
	seeds := flag.Int("seeds", 20, "seeds to run (besides the replay list)")
	start := flag.Uint64("start", 0, "first seed (0 = a random one, printed)")
	one := flag.Uint64("seed", 0, "replay this seed alone, verbose")
	budget := flag.Duration("budget", 0, "start no new seed after this long (0 = none); the replay list always runs whole")
	backend := flag.String("redis", explore.BackendMixed, "miniredis, redis-server, sentinel (master, replica, sentinel), cluster (3 masters, 3 replicas), or mixed (miniredis or redis-server by the seed's parity)")
	portRange := flag.String("ports", "", "start the redis-server processes on free ports of this range only, e.g. 6550-6649 (default: any free port)")
	jobs := flag.Int("j", 2, "seeds run at once")
	replay := flag.String("replay", "", "replay list run first (and where -record appends)")
	record := flag.Bool("record", false, "append every new failing seed to the replay list")
	race := flag.Bool("race", true, "build the hosts with the race detector")
	verbose := flag.Bool("v", false, "print every seed's schedule as it runs")
	keep := flag.Bool("keep", false, "keep every seed's logs")
	only := flag.String("only", "", "with -seed: run only these steps of its schedule (comma-separated indexes)")
	minimize := flag.Int("minimize", 0, "with -seed: shrink its schedule to the steps that still break this invariant")
	tries := flag.Int("tries", 3, "with -minimize: runs of each candidate schedule")
	cpuProfile := flag.String("cpuprofile", "", "write the explorer's own CPU profile (the judge, the sampler, miniredis) to this file")
	flag.Parse()
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			fail(err.Error())
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fail(err.Error())
		}
		defer pprof.StopCPUProfile()
	}
	if *backend != explore.BackendMixed && !slices.Contains(explore.Backends, *backend) {
		fail("-redis must be one of " + strings.Join(explore.Backends, ", ") + " or mixed")
	}
	lo, hi, err := explore.ParsePorts(*portRange)
	if err != nil {
		fail("-ports: " + err.Error())
	}
	if err := explore.Subreaper(); err != nil {
		fail("become a subreaper: " + err.Error())
	}
	dir, err := os.MkdirTemp("", "vigil-explore")
	if err != nil {
		fail(err.Error())
	}
	defer os.RemoveAll(dir)
	hostBin, workerBin, err := explore.Build(dir, *race)
	if err != nil {
		fail(err.Error())
	}
	sh, err := explore.NewShared(hostBin, workerBin)
	if err != nil {
		fail(err.Error())
	}
	defer sh.Close()
	// A worker binary of its own for each host of the seeds under way
	// (at most three each): seeds share no executable's mapping lock.
	if err := sh.SpreadWorkers(3 * max(1, *jobs)); err != nil {
		fail("copy the worker binary: " + err.Error())
	}
	sh.SetPorts(lo, hi)
	// The explorer's own Redis clients (its judge's, on a Sentinel or a
	// Cluster) log nothing: a failover's dial errors are the schedule's
	// doing, and the hosts log theirs in their own logs.
	redisconn.SetLogger(slog.New(slog.DiscardHandler))
	opts := explore.Options{Backend: *backend, Verbose: *verbose, Out: os.Stdout, Keep: *keep}
	if *only != "" {
		for _, f := range strings.Split(*only, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil {
				fail("-only: " + err.Error())
			}
			opts.Only = append(opts.Only, n)
		}
	}
	if *minimize > 0 {
		if *one == 0 {
			fail("-minimize needs -seed")
		}
		keep := explore.Minimize(*one, *minimize, *tries, opts, sh, func(s string) { fmt.Println("minimize:", s) })
		plan := explore.Draw(*one, *backend).Only(keep)
		fmt.Printf("minimal schedule of seed %d for invariant %d (-only %s):\n", *one, *minimize, joinInts(keep))
		for _, s := range plan.Steps {
			fmt.Println("  " + s.String())
		}
		opts.Only = keep
	}

	type task struct {
		seed    uint64
		backend string
		known   string
		replay  bool
	}
	var tasks []task
	if *one != 0 {
		opts.Verbose = true
		tasks = append(tasks, task{seed: *one, backend: *backend})
		*seeds = 0
	} else if *replay != "" {
		list, err := explore.ReadReplays(*replay)
		if err != nil {
			fail(err.Error())
		}
		// Seeds that must pass first (a budget may not reach the end of
		// the list), then those marked known.
		for _, known := range []bool{false, true} {
			for _, r := range list {
				if (r.Known != "") == known {
					tasks = append(tasks, task{seed: r.Seed, backend: r.Backend, known: r.Known, replay: true})
				}
			}
		}
	}
	if *start == 0 && *seeds > 0 {
		*start = rand.Uint64N(1<<40) + 1
	}
	if *seeds > 0 {
		fmt.Printf("explore: seeds %d.. (%d), redis %s, %d at a time, budget %s, hosts built with -race=%v\n", *start, *seeds, *backend, *jobs, *budget, *race)
	}
	for i := range *seeds {
		tasks = append(tasks, task{seed: *start + uint64(i), backend: *backend})
	}

	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	var mu sync.Mutex
	var sum explore.Summary
	var unexpected, knownFailed []uint64
	var nowPassing []string
	interrupted, warned := false, false
	began := time.Now()
	next := 0
	var wg sync.WaitGroup
	for range max(1, *jobs) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				select {
				case <-stop:
					interrupted = true
				default:
				}
				// The budget bounds new seeds only: every seed that ever
				// failed runs each time (CI relies on it).
				spent := *budget > 0 && time.Since(began) > *budget
				over := interrupted || next >= len(tasks) || (spent && !tasks[next].replay)
				if spent && !interrupted && next < len(tasks) && tasks[next].replay && !warned {
					warned = true
					fmt.Printf("explore: the budget ran out before the replay list did; it runs to its end\n")
				}
				if over {
					mu.Unlock()
					return
				}
				t := tasks[next]
				next++
				mu.Unlock()
				o := opts
				if t.backend != "" {
					o.Backend = t.backend
				}
				r := explore.RunSeed(t.seed, o, sh)
				// A failure on an overloaded machine is run again: the
				// timings are real, and a busy machine breaks them by itself.
				inconclusive := false
				first := r
				for try := 0; r.Failed() && r.Overloaded && try < 2; try++ {
					again := explore.RunSeed(t.seed, o, sh)
					if !again.Failed() {
						inconclusive = true
					}
					r = again
				}
				inconclusive = inconclusive || (r.Failed() && r.Overloaded)
				mu.Lock()
				if inconclusive {
					sum.Inconclusive = append(sum.Inconclusive, t.seed)
					fmt.Printf("seed %d failed only on an overloaded machine (%s): inconclusive; it failed with: %s\n", t.seed, first.Load, first.Violations[0])
					r.Violations = nil
				}
				sum.Add(r)
				switch {
				case inconclusive:
				case r.Failed() && t.known != "":
					knownFailed = append(knownFailed, t.seed)
					fmt.Printf("seed %d failed as known (%s): %s\n", t.seed, t.known, r.Violations[0])
				case r.Failed():
					unexpected = append(unexpected, t.seed)
					fmt.Print(r.Report())
					if *record && *replay != "" && !t.replay {
						if err := explore.AppendReplay(*replay, r); err != nil {
							fmt.Println("record:", err)
						}
					}
				case t.known != "":
					nowPassing = append(nowPassing, fmt.Sprintf("%d (%s)", t.seed, t.known))
				}
				if *one != 0 && !r.Failed() {
					fmt.Printf("seed %d passed in %s (%s)\n", t.seed, r.Took.Round(time.Millisecond), r.Phases)
				}
				if n := sum.Seeds; n%50 == 0 {
					fmt.Printf("explore: %d seeds, %d failed, %s\n", n, sum.Failed, time.Since(began).Round(time.Second))
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	wall := time.Since(began)
	fmt.Printf("\n==== explore summary\n%s\nwall time %s, %.0f seeds/hour, mean seed %s\n", sum, wall.Round(time.Second),
		float64(sum.Seeds)/wall.Hours(), (sum.Took / time.Duration(max(1, sum.Seeds))).Round(time.Millisecond))
	if len(knownFailed) > 0 {
		fmt.Printf("known failures (marked in the replay list): %v\n", knownFailed)
	}
	if len(nowPassing) > 0 {
		fmt.Printf("marked known but passing now (remove the mark): %v\n", nowPassing)
	}
	if len(unexpected) > 0 {
		fmt.Printf("FAILED seeds: %v\n", unexpected)
		pprof.StopCPUProfile() // os.Exit runs no deferred call
		os.Exit(1)
	}
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}

func fail(msg string) {
	fmt.Fprintln(os.Stderr, "explore:", msg)
	os.Exit(2)
}
