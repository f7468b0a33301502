package failover_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/vigil-dev/vigil/internal/testledger"
	"github.com/vigil-dev/vigil/internal/testtopo"
)

const (
	envGate = "VIGIL_FAILOVER"
	// envRuns is how many runs of each scenario (default 1).
	envRuns = "VIGIL_FAILOVER_RUNS"
	// envOnly keeps the scenarios whose name contains one of its
	// comma-separated words.
	envOnly = "VIGIL_FAILOVER_ONLY"
	// envOut, if set, names a file each run's result is appended to (JSON
	// lines), for RELIABILITY.md's table.
	envOut = "VIGIL_FAILOVER_OUT"
	// envDurable, set to N > 0, runs the hosts with durable_enqueue
	// {replicas: N, timeout: 500ms}; the scenarios' names get "+durable",
	// and a killed master is started again (it comes back as a replica:
	// without one, no enqueue can be durable).
	envDurable = "VIGIL_FAILOVER_DURABLE"
	// envLogs, if set, names a directory where each run's host logs are
	// kept (<scenario>-run<n>-<host>.log).
	envLogs = "VIGIL_FAILOVER_LOGS"
	// envPortBase, if set, moves every port of the suite (6431-6459 by
	// default) to start there instead, so that two runs on one machine
	// (two sessions, a CI job beside a developer) do not collide.
	envPortBase = "VIGIL_FAILOVER_PORT_BASE"

	queueName   = "fo"
	jobMS       = 50
	enqueueStep = 100 * time.Millisecond
	warmUp      = 2 * time.Second
	after       = 4 * time.Second // enqueuing goes on this long after the new master
	// afterDurable is after with durable_enqueue.
	afterDurable = 20 * time.Second
)

var (
	sentinelPorts = testtopo.SentinelPorts{Master: port(6431), Replica: port(6432), Sentinel: port(6433)}
	clusterPorts  = []int{port(6440), port(6441), port(6442), port(6443), port(6444), port(6445)}
	ledgerPort    = port(6459)
)

// port is the suite's port p (6431-6459), moved by VIGIL_FAILOVER_PORT_BASE.
func port(p int) int {
	base, err := strconv.Atoi(os.Getenv(envPortBase))
	if err != nil || base <= 0 {
		return p
	}
	return p - 6431 + base
}

// scenario is a topology and a fault. start returns Vigil's Redis URL and
// the fault, which returns when it was injected and when the new master
// took over.
type scenario struct {
	name  string
	start func(t *testing.T) (url string, fault func(ctx context.Context) (time.Time, testtopo.Switch, error))
	// stopHost: host b is stopped gracefully (SIGTERM) as the fault is
	// injected; it must exit 0 within stop_timeout + 2 s, its workers
	// finishing or handing back their jobs.
	stopHost bool
	// check, if set, judges what is particular to the fault (its log
	// line, its metric), on the hosts before their graceful stops.
	check func(t *testing.T, hosts []*host)
}

var scenarios = []scenario{
	{name: "sentinel/failover", start: func(t *testing.T) (string, func(context.Context) (time.Time, testtopo.Switch, error)) {
		s := testtopo.StartSentinel(t, sentinelPorts, testtopo.SentinelConfig{})
		return s.URL, func(ctx context.Context) (time.Time, testtopo.Switch, error) {
			at, err := s.Failover(ctx)
			if err != nil {
				return at, testtopo.Switch{}, err
			}
			sw, err := s.WaitNewMaster(ctx)
			return at, sw, err
		}
	}},
	{name: "sentinel/kill", start: func(t *testing.T) (string, func(context.Context) (time.Time, testtopo.Switch, error)) {
		s := testtopo.StartSentinel(t, sentinelPorts, testtopo.SentinelConfig{})
		return s.URL, func(ctx context.Context) (time.Time, testtopo.Switch, error) {
			at := s.Master.Kill()
			sw, err := s.WaitNewMaster(ctx)
			if err == nil && durable() > 0 {
				s.Master.Restart(t)
			}
			return at, sw, err
		}
	}},
	clusterKill("cluster/kill-queue", "asynq:{"+queueName+"}:pending"),
	{name: "sentinel/kill-during-shutdown", stopHost: true, start: func(t *testing.T) (string, func(context.Context) (time.Time, testtopo.Switch, error)) {
		s := testtopo.StartSentinel(t, sentinelPorts, testtopo.SentinelConfig{})
		return s.URL, func(ctx context.Context) (time.Time, testtopo.Switch, error) {
			at := s.Master.Kill()
			sw, err := s.WaitNewMaster(ctx)
			return at, sw, err
		}
	}},
	clusterKill("cluster/kill-events", "vigil:events"),
}

// clusterKill SIGKILLs the master of the shard that holds key.
func clusterKill(name, key string) scenario {
	return scenario{name: name, start: func(t *testing.T) (string, func(context.Context) (time.Time, testtopo.Switch, error)) {
		c := testtopo.StartCluster(t, clusterPorts, testtopo.ClusterConfig{})
		return c.URL, func(ctx context.Context) (time.Time, testtopo.Switch, error) {
			sh, err := c.ShardOf(ctx, key)
			if err != nil {
				return time.Time{}, testtopo.Switch{}, err
			}
			at := sh.Master.Kill()
			sw, err := c.WaitPromoted(ctx, sh.Replica)
			if err == nil && durable() > 0 {
				sh.Master.Restart(t)
			}
			return at, sw, err
		}
	}}
}

// result is one run's figures.
type result struct {
	Scenario string `json:"scenario"`
	Run      int    `json:"run"`
	// From the fault: when the new master was elected and announced (ms).
	PromotedMS  int64 `json:"promoted_ms"`
	AnnouncedMS int64 `json:"announced_ms"`
	// From the announced new master: each host's API answering again, the
	// first job enqueued after it done, and the later of those (ms).
	APIBackMS map[string]int64 `json:"api_back_ms"`
	JobBackMS int64            `json:"job_back_ms"`
	WorkingMS int64            `json:"working_ms"`
	// ShutdownMS: how long host b took to stop (stopHost scenarios).
	ShutdownMS int64 `json:"shutdown_ms,omitempty"`
	// Damage.
	APIErrors      int            `json:"api_errors"`
	Accepted       int            `json:"accepted"`
	DoneOnce       int            `json:"done_once"`
	DoneTwice      int            `json:"done_twice"`
	Lost           int            `json:"lost"`
	WorkersKilled  int            `json:"workers_killed"`
	CrashesCounted int            `json:"crashes_counted"`
	LogLines       map[string]int `json:"log_lines"`
	Load           string         `json:"load"`
}

// watched are the log lines a run counts, on both hosts.
var watched = map[string]string{
	"unreachable": "redis unreachable",
	"lost_data":   "lost its data",
	"host_lost":   `"msg":"host lost"`,
	"leadership":  "leadership changed",
	"lease_lost":  "slot lease lost",
	"hb_expired":  "heartbeat expired",
	"held":        "failover of the master under way",
	"readonly":    "READONLY",
	"clusterdown": "CLUSTERDOWN",
}

// durable is envDurable's number of replicas (0: off).
func durable() int {
	n, _ := strconv.Atoi(os.Getenv(envDurable))
	return max(n, 0)
}

func TestFailover(t *testing.T) {
	if os.Getenv(envGate) == "" {
		t.Skipf("starts real Redis topologies and two vigil hosts: set %s=1 (make test-failover)", envGate)
	}
	runs := 1
	if n, err := strconv.Atoi(os.Getenv(envRuns)); err == nil && n > 0 {
		runs = n
	}
	for _, sc := range scenarios {
		if only := os.Getenv(envOnly); only != "" && !matchesAny(sc.name, only) {
			continue
		}
		t.Run(strings.ReplaceAll(sc.name, "/", "_"), func(t *testing.T) {
			for i := range runs {
				t.Run("run"+strconv.Itoa(i+1), func(t *testing.T) { runScenario(t, sc, i+1) })
			}
		})
	}
}

func matchesAny(name, words string) bool {
	for w := range strings.SplitSeq(words, ",") {
		if w = strings.TrimSpace(w); w != "" && strings.Contains(name, w) {
			return true
		}
	}
	return false
}

// answer is one enqueue request.
type answer struct {
	host           string
	sent, answered time.Time
	code           int
	id             string
}

func runScenario(t *testing.T, sc scenario, run int) {
	ledgerSrv := testtopo.StartServer(t, ledgerPort)
	lc := redis.NewClient(&redis.Options{Addr: ledgerSrv.Addr()})
	defer lc.Close()
	lr := testledger.NewReader(lc, "ledger:")
	ledgerEnv := map[string]string{testledger.EnvURL: "redis://" + ledgerSrv.Addr() + "/0", testledger.EnvPrefix: lr.Prefix()}

	url, fault := sc.start(t)
	hosts := []*host{startHost(t, "a", url, ledgerEnv), startHost(t, "b", url, ledgerEnv)}
	waitHealthy(t, hosts[0], 4)
	restarts0 := restarts(t, hosts[0])

	// Jobs through both APIs, every 100 ms each.
	stopEnq := make(chan struct{})
	var mu sync.Mutex
	var answers []answer
	var wg sync.WaitGroup
	for _, h := range hosts {
		wg.Go(func() {
			tick := time.NewTicker(enqueueStep)
			defer tick.Stop()
			for {
				select {
				case <-stopEnq:
					return
				case <-h.done:
					return // stopped by the scenario
				case <-tick.C:
				}
				a := answer{host: h.id, sent: time.Now()}
				code, body, err := h.do(http.MethodPost, "/api/v1/queues/"+queueName+"/jobs", map[string]any{"type": "sleep", "payload": jobMS})
				a.answered, a.code = time.Now(), code
				if err == nil && code == http.StatusCreated {
					var j struct{ ID string }
					_ = json.Unmarshal(body, &j)
					a.id = j.ID
				}
				mu.Lock()
				answers = append(answers, a)
				mu.Unlock()
			}
		})
	}
	time.Sleep(warmUp) // jobs flow before the fault
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	stopped := make(chan time.Duration, 1)
	stopAt := time.Now()
	if sc.stopHost {
		go func() {
			start := time.Now()
			hosts[1].stop(30 * time.Second)
			stopped <- time.Since(start)
		}()
	}
	faultAt, sw, err := fault(ctx)
	if err != nil {
		close(stopEnq)
		wg.Wait()
		t.Fatalf("fault: %v", err)
	}
	window := after
	if durable() > 0 {
		// A durable enqueue waits for a replica: the old master, which the
		// sentinel makes one about 10 s after the switch.
		window = afterDurable
	}
	time.Sleep(time.Until(sw.Announced.Add(window)))
	close(stopEnq)
	wg.Wait()

	name := sc.name
	if durable() > 0 {
		name += "+durable"
	}
	res := result{Scenario: name, Run: run, PromotedMS: sw.Promoted.Sub(faultAt).Milliseconds(),
		AnnouncedMS: sw.Announced.Sub(faultAt).Milliseconds(), APIBackMS: map[string]int64{}, LogLines: map[string]int{}}
	tNew := sw.Announced
	accepted := map[string]answer{}
	lastFail := map[string]time.Time{}
	for _, a := range answers {
		if sc.stopHost && a.host == hosts[1].id && a.sent.After(stopAt) {
			continue // host b is shutting down: its refusals are expected
		}
		if a.code == http.StatusCreated && a.id != "" {
			accepted[a.id] = a
			continue
		}
		res.APIErrors++
		if a.answered.After(lastFail[a.host]) {
			lastFail[a.host] = a.answered
		}
	}
	live := hosts
	if sc.stopHost {
		live = hosts[:1]
		d := <-stopped
		res.ShutdownMS = d.Milliseconds()
		if code := hosts[1].cmd.ProcessState.ExitCode(); code != 0 || d > 7*time.Second {
			t.Errorf("host b stopped during the failover: exit %d after %s, want 0 within stop_timeout (5s) + 2s", code, d.Round(time.Millisecond))
		}
	}
	for _, h := range live {
		from := tNew
		if lastFail[h.id].After(from) {
			from = lastFail[h.id]
		}
		back := time.Time{}
		for _, a := range answers {
			if a.host == h.id && a.id != "" && a.answered.After(from) && (back.IsZero() || a.answered.Before(back)) {
				back = a.answered
			}
		}
		if back.IsZero() {
			t.Errorf("host %s: no enqueue answered 201 after the new master", h.id)
			res.APIBackMS[h.id] = -1
			continue
		}
		res.APIBackMS[h.id] = back.Sub(tNew).Milliseconds()
		res.WorkingMS = max(res.WorkingMS, res.APIBackMS[h.id])
	}
	res.Accepted = len(accepted)

	// Drain: every accepted job done, or 30 s.
	deadline := time.Now().Add(30 * time.Second)
	var completions map[string]int
	for {
		completions, err = lr.Counts(context.Background(), "completions")
		if err != nil {
			t.Fatal(err)
		}
		missing := 0
		for id := range accepted {
			if completions[id] == 0 {
				missing++
			}
		}
		if missing == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond) // polling the worker processes' ledger
	}
	firstDone, _ := lr.Hash(context.Background(), "first_done")
	var jobBack time.Time
	for id, a := range accepted {
		switch n := completions[id]; {
		case n == 0:
			res.Lost++
		case n == 1:
			res.DoneOnce++
		default:
			res.DoneTwice++
		}
		if a.answered.Before(tNew) {
			continue
		}
		if ms, err := strconv.ParseInt(firstDone[id], 10, 64); err == nil {
			if at := time.UnixMilli(ms); jobBack.IsZero() || at.Before(jobBack) {
				jobBack = at
			}
		}
	}
	if jobBack.IsZero() {
		t.Errorf("no job enqueued after the new master was done")
		res.JobBackMS = -1
	} else {
		res.JobBackMS = jobBack.Sub(tNew).Milliseconds() - jobMS
		res.WorkingMS = max(res.WorkingMS, res.JobBackMS)
	}
	res.CrashesCounted = restarts(t, hosts[0]) - restarts0
	// The log lines of the run, counted before the graceful stops: the
	// leader stops first and the other host takes the leader lease, a
	// handover that is no failover's doing.
	for _, h := range hosts {
		for k, s := range watched {
			res.LogLines[k] += h.count(s)
		}
	}
	if sc.check != nil {
		sc.check(t, hosts)
	}
	for _, h := range hosts {
		h.stop(15 * time.Second)
		if dir := os.Getenv(envLogs); dir != "" {
			f := filepath.Join(dir, fmt.Sprintf("%s-run%d-%s.log", strings.ReplaceAll(name, "/", "_"), run, h.id))
			if err := os.WriteFile(f, []byte(h.logText()), 0o644); err != nil {
				t.Errorf("keep host %s's log: %v", h.id, err)
			}
		}
	}
	procs, _ := lr.Hash(context.Background(), "procs")
	exits, _ := lr.Hash(context.Background(), "exits")
	var killed []string // pids
	for pid, who := range procs {
		if _, ok := exits[pid]; !ok {
			res.WorkersKilled++
			killed = append(killed, pid)
			t.Logf("worker pid %s (%s) ended without its exit on record (killed)", pid, who)
		}
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		res.Load = strings.Join(strings.Fields(string(b))[:3], " ")
	}
	line, _ := json.Marshal(res)
	t.Logf("RESULT %s", line)
	if out := os.Getenv(envOut); out != "" {
		if f, err := os.OpenFile(out, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err == nil {
			fmt.Fprintf(f, "%s\n", line)
			f.Close()
		}
	}
	if durable() > 0 && res.Lost > 0 {
		t.Errorf("%s: %d jobs answered 201 were lost with durable_enqueue (want 0)", name, res.Lost)
	}
	if res.DoneTwice > 0 || res.WorkersKilled > 0 || res.CrashesCounted > 0 {
		t.Errorf("%s: %d jobs done twice, %d healthy workers killed, %d crashes counted (want 0 each)",
			sc.name, res.DoneTwice, res.WorkersKilled, res.CrashesCounted)
		// One line a call: make test-failover keeps only the lines that
		// name a _test.go file, and CI's output is all there is of a run.
		for _, h := range hosts {
			for line := range strings.SplitSeq(grepLevels(h.logText(), 80), "\n") {
				t.Logf("host %s (errors and warnings): %s", h.id, line)
			}
			for _, pid := range killed {
				for line := range strings.SplitSeq(h.logText(), "\n") {
					if strings.Contains(line, pid) {
						t.Logf("host %s (pid %s): %s", h.id, pid, line)
					}
				}
			}
		}
	}
}

// waitHealthy waits until n workers are healthy.
func waitHealthy(t *testing.T, h *host, n int) {
	t.Helper()
	deadline := time.Now().Add(45 * time.Second)
	for {
		ws := workers(t, h)
		healthy := 0
		for _, w := range ws {
			if w.Status == "healthy" {
				healthy++
			}
		}
		if healthy >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d workers healthy after 45 s: %+v\n%s", healthy, n, ws, h.logText())
		}
		time.Sleep(100 * time.Millisecond) // polling the hosts' API
	}
}

type workerView struct {
	Component        string `json:"component"`
	Status           string `json:"status"`
	LifetimeRestarts int    `json:"lifetime_restarts"`
}

func workers(t *testing.T, h *host) []workerView {
	t.Helper()
	code, body, err := h.do(http.MethodGet, "/api/v1/workers", nil)
	if err != nil || code != http.StatusOK {
		t.Fatalf("GET /api/v1/workers: %d %v %s", code, err, body)
	}
	var out struct{ Workers []workerView }
	if err := json.Unmarshal(body, &out); err != nil {
		t.Fatal(err)
	}
	return out.Workers
}

// restarts is the sum of counted restarts of every worker.
func restarts(t *testing.T, h *host) int {
	t.Helper()
	n := 0
	for _, w := range workers(t, h) {
		n += w.LifetimeRestarts
	}
	return n
}

// grepLevels returns the last n warning and error lines of a JSON log.
func grepLevels(log string, n int) string {
	var out []string
	for line := range strings.SplitSeq(log, "\n") {
		if strings.Contains(line, `"level":"WARN"`) || strings.Contains(line, `"level":"ERROR"`) {
			out = append(out, line)
		}
	}
	if len(out) > n {
		out = out[len(out)-n:]
	}
	return strings.Join(out, "\n")
}
