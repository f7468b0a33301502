package compat_test

// This side is an asynq user's: asynq's Client, Inspector and Scheduler
// and plain HTTP to Vigil's API. It imports no Vigil package.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hibiken/asynq"
)

const wait = 60 * time.Second // generous: two shared cores under -race

// vigil is a running `vigil serve`.
type vigil struct {
	tb   testing.TB
	cfg  string
	base string
	cmd  *exec.Cmd
	out  *bytes.Buffer
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func freePort(tb testing.TB) int {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// writeConfig writes a configuration of one pool consuming q: one worker,
// task_timeout 2s, retention 1h.
func writeConfig(tb testing.TB, redisURL, q string) (path, base string) {
	tb.Helper()
	port := freePort(tb)
	suffix := randHex(3)
	cfg := fmt.Sprintf(`redis: %q
listen: 127.0.0.1:%d
prefix: "vcompat%s:"
host: compat%s
lease: 3s
stop_timeout: 3s
heartbeat: {interval: 200ms, ttl: 3s, start_timeout: 30s}
pools:
  - queue: %s
    workers: 1
    command: [%q]
    concurrency: 4
    task_timeout: 2s
    retention: 1h
`, redisURL, port, suffix, suffix, q, workerBin)
	path = filepath.Join(tb.TempDir(), "vigil.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		tb.Fatal(err)
	}
	return path, fmt.Sprintf("http://127.0.0.1:%d", port)
}

func startVigil(tb testing.TB, cfg, base string) *vigil {
	tb.Helper()
	v := &vigil{tb: tb, cfg: cfg, base: base, out: &bytes.Buffer{}}
	v.cmd = exec.Command(vigilBin, "serve", "--config", cfg)
	v.cmd.Stdout, v.cmd.Stderr = v.out, v.out
	if err := v.cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	v.until("vigil serve ready", func() bool {
		resp, err := http.Get(base + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return v
}

// stop ends vigil serve as an operator does (SIGTERM) and waits.
func (v *vigil) stop() {
	if v.cmd.ProcessState != nil {
		return
	}
	_ = v.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- v.cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		_ = v.cmd.Process.Kill()
		<-done
		v.tb.Errorf("vigil serve did not stop on SIGTERM:\n%s", v.out.String())
	}
}

// until polls cond (every 50 ms, each poll a Redis or HTTP round trip)
// until it holds, or fails the test after wait.
func (v *vigil) until(what string, cond func() bool) {
	v.tb.Helper()
	deadline := time.Now().Add(wait)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			v.tb.Fatalf("timed out waiting for %s; vigil's output:\n%s", what, tail(v.out.String(), 3000))
		}
		<-tick.C
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

func (v *vigil) get(path string, out any) int {
	v.tb.Helper()
	resp, err := http.Get(v.base + path)
	if err != nil {
		v.tb.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil && resp.StatusCode < 300 {
		if err := json.Unmarshal(b, out); err != nil {
			v.tb.Fatalf("GET %s: %v: %s", path, err, b)
		}
	}
	return resp.StatusCode
}

func (v *vigil) post(path, body string, out any) int {
	v.tb.Helper()
	resp, err := http.Post(v.base+path, "application/json", strings.NewReader(body))
	if err != nil {
		v.tb.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			v.tb.Fatalf("POST %s: %v: %s", path, err, b)
		}
	}
	return resp.StatusCode
}

// queueStats is Vigil's GET /api/v1/queues/{q}.
type queueStats struct {
	Pending, Running, Scheduled, Retry, Archived, Completed, Aggregating int
	ProcessedTotal                                                       int    `json:"processed_total"`
	FailedTotal                                                          int    `json:"failed_total"`
	Paused                                                               bool   `json:"paused"`
	PausedBy                                                             string `json:"paused_by"`
	LiveWorkers                                                          int    `json:"live_workers"`
}

// job is Vigil's GET /api/v1/jobs/{q}/{id}.
type job struct {
	ID               string          `json:"id"`
	State            string          `json:"state"`
	LastError        string          `json:"last_error"`
	CompletedAt      int64           `json:"completed_at"`
	Result           json.RawMessage `json:"result"`
	EffectiveTimeout float64         `json:"effective_timeout_seconds"`
	TimeoutSource    string          `json:"timeout_source"`
	RetentionS       float64         `json:"retention_seconds"`
}

type pauseResult struct {
	Changed bool   `json:"changed"`
	Paused  bool   `json:"paused"`
	Message string `json:"message"`
}

// result prints one row of the closing table: the asynq figure and
// Vigil's, side by side.
func result(tb testing.TB, point string, asynqFig, vigilFig any) {
	tb.Helper()
	tb.Logf("RESULT | %-44s | asynq: %-34v | vigil: %v", point, asynqFig, vigilFig)
}

// sse follows topic on Vigil's event stream; each event's JSON arrives on
// the channel.
func (v *vigil) sse(ctx context.Context, topic string) <-chan map[string]any {
	v.tb.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, v.base+"/api/v1/events?topic="+topic, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		v.tb.Fatal(err)
	}
	ch := make(chan map[string]any, 100)
	go func() {
		defer resp.Body.Close()
		defer close(ch)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			data, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok {
				continue
			}
			var m map[string]any
			if json.Unmarshal([]byte(data), &m) == nil {
				select {
				case ch <- m:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return ch
}

// awaitQueueUpdate waits for a queue_update whose statistics satisfy ok
// and returns how long it took.
func awaitQueueUpdate(tb testing.TB, ch <-chan map[string]any, ok func(map[string]any) bool) time.Duration {
	tb.Helper()
	start := time.Now()
	timeout := time.After(wait)
	for {
		select {
		case m, open := <-ch:
			if !open {
				tb.Fatal("event stream closed")
			}
			if m["type"] != "queue_update" {
				continue
			}
			if d, _ := m["data"].(map[string]any); d != nil && ok(d) {
				return time.Since(start)
			}
		case <-timeout:
			tb.Fatal("no queue_update in time")
		}
	}
}

func TestAsynqCompatibility(t *testing.T) {
	url := os.Getenv("VIGIL_TEST_REDIS_URL")
	if url == "" {
		t.Skip("the compatibility suite runs against a real Redis: set VIGIL_TEST_REDIS_URL (make test-redis)")
	}
	opt, err := asynq.ParseRedisURI(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(http.DefaultClient.CloseIdleConnections) // runs last
	q := "compat" + randHex(3)
	insp := asynq.NewInspector(opt)
	client := asynq.NewClient(opt)
	t.Cleanup(func() {
		_ = insp.DeleteQueue(q, true)
		insp.Close()
		client.Close()
	})
	cfg, base := writeConfig(t, url, q)
	v := startVigil(t, cfg, base)
	t.Cleanup(func() { v.stop() })
	stats := func() queueStats {
		t.Helper()
		var s queueStats
		if c := v.get("/api/v1/queues/"+q, &s); c != http.StatusOK {
			t.Fatalf("GET queue: %d", c)
		}
		return s
	}
	info := func() *asynq.QueueInfo {
		t.Helper()
		i, err := insp.GetQueueInfo(q)
		if err != nil {
			t.Fatal(err)
		}
		return i
	}
	v.until("a live worker", func() bool { return stats().LiveWorkers == 1 })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	events := v.sse(ctx, "queue:"+q+":status")

	// 1. Pause, asynq → Vigil: asynq's Inspector pauses; Vigil's API and
	// events say paused by asynq.
	if err := insp.PauseQueue(q); err != nil {
		t.Fatal(err)
	}
	took := awaitQueueUpdate(t, events, func(d map[string]any) bool { return d["paused"] == true && d["paused_by"] == "asynq" })
	s := stats()
	if !s.Paused || s.PausedBy != "asynq" {
		t.Fatalf("asynq's pause: Vigil says %+v", s)
	}
	result(t, "pause by asynq.Inspector shown", "paused=true", fmt.Sprintf("paused=%v paused_by=%s; queue_update after %v", s.Paused, s.PausedBy, took.Round(time.Millisecond)))

	// Tasks while paused: asynq's Client enqueues, Vigil counts.
	var asynqIDs []string
	for i := range 3 {
		opts := []asynq.Option{asynq.Queue(q)}
		if i < 2 {
			opts = append(opts, asynq.Retention(time.Hour))
		}
		ti, err := client.Enqueue(asynq.NewTask("compat:ok", nil), opts...)
		if err != nil {
			t.Fatal(err)
		}
		asynqIDs = append(asynqIDs, ti.ID)
	}
	for range 2 {
		if _, err := client.Enqueue(asynq.NewTask("compat:ok", nil), asynq.Queue(q), asynq.ProcessIn(time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	arch, err := client.Enqueue(asynq.NewTask("compat:ok", []byte(`"to archive"`)), asynq.Queue(q))
	if err != nil {
		t.Fatal(err)
	}
	if err := insp.ArchiveTask(q, arch.ID); err != nil {
		t.Fatal(err)
	}
	// Vigil's API enqueues, asynq sees it with the pool's timeout and
	// retention.
	var vj job
	if c := v.post("/api/v1/queues/"+q+"/jobs", `{"type":"compat:ok"}`, &vj); c != http.StatusCreated {
		t.Fatalf("enqueue through Vigil: %d", c)
	}
	ti, err := insp.GetTaskInfo(q, vj.ID)
	if err != nil || ti.State != asynq.TaskStatePending || ti.Retention != time.Hour || ti.Timeout != 2*time.Second {
		t.Fatalf("asynq's view of Vigil's job: %+v, %v", ti, err)
	}
	result(t, "job enqueued through Vigil's API", fmt.Sprintf("state=%s timeout=%v retention=%v", ti.State, ti.Timeout, ti.Retention), "state=pending (201)")

	// 2. A Vigil restart never lifts a pause.
	v.stop()
	v = startVigil(t, cfg, base)
	events = v.sse(ctx, "queue:"+q+":status") // the old stream ended with the old process
	in, s := info(), stats()
	if !in.Paused || !s.Paused {
		t.Fatalf("after a Vigil restart: asynq paused=%v, Vigil paused=%v", in.Paused, s.Paused)
	}
	result(t, "pause held across a Vigil restart", fmt.Sprintf("paused=%v", in.Paused), fmt.Sprintf("paused=%v paused_by=%s", s.Paused, s.PausedBy))

	// 3. Counts per state and job lists, while paused.
	in, s = info(), stats()
	if in.Pending != s.Pending || in.Scheduled != s.Scheduled || in.Archived != s.Archived || in.Pending != 4 || in.Scheduled != 2 || in.Archived != 1 {
		t.Fatalf("counts: asynq %+v, Vigil %+v", in, s)
	}
	result(t, "pending / scheduled / archived (paused)", fmt.Sprintf("%d / %d / %d", in.Pending, in.Scheduled, in.Archived), fmt.Sprintf("%d / %d / %d", s.Pending, s.Scheduled, s.Archived))
	pend, err := insp.ListPendingTasks(q, asynq.PageSize(100))
	if err != nil {
		t.Fatal(err)
	}
	var vl struct{ Jobs []job }
	if c := v.get("/api/v1/queues/"+q+"/jobs?state=pending&page_size=100", &vl); c != http.StatusOK {
		t.Fatalf("list: %d", c)
	}
	var a, b []string
	for _, p := range pend {
		a = append(a, p.ID)
	}
	for _, j := range vl.Jobs {
		b = append(b, j.ID)
	}
	slices.Sort(a)
	slices.Sort(b)
	if !slices.Equal(a, b) {
		t.Fatalf("pending lists: asynq %v, Vigil %v", a, b)
	}
	result(t, "pending job list (ids)", fmt.Sprintf("%d ids", len(a)), fmt.Sprintf("%d ids, the same", len(b)))

	// 4. Vigil's resume of asynq's pause says what it did; asynq sees it.
	var pr pauseResult
	v.post("/api/v1/queues/"+q+"/resume", "", &pr)
	if !pr.Changed || !strings.Contains(pr.Message, "asynq's tools") || info().Paused {
		t.Fatalf("resume of asynq's pause: %+v", pr)
	}
	result(t, "Vigil resume of asynq's pause", "paused=false", pr.Message)

	// The pending tasks run; completed is what asynq keeps (Retention).
	v.until("pending tasks done", func() bool { i := info(); return i.Pending == 0 && i.Active == 0 })
	v.until("Vigil's counts settle", func() bool { s := stats(); return s.Pending == 0 && s.Running == 0 })
	in, s = info(), stats()
	if in.Completed != 3 || s.Completed != in.Completed || s.ProcessedTotal != in.ProcessedTotal || s.FailedTotal != in.FailedTotal {
		t.Fatalf("completed: asynq %+v, Vigil %+v", in, s)
	}
	result(t, "completed (kept) / processed_total / failed_total", fmt.Sprintf("%d / %d / %d", in.Completed, in.ProcessedTotal, in.FailedTotal), fmt.Sprintf("%d / %d / %d", s.Completed, s.ProcessedTotal, s.FailedTotal))

	// 5. Finished jobs answer: Vigil's job (pool retention) and asynq's.
	for _, id := range []string{vj.ID, asynqIDs[0]} {
		ti, err := insp.GetTaskInfo(q, id)
		var j job
		code := v.get("/api/v1/jobs/"+q+"/"+id, &j)
		if err != nil || ti.State != asynq.TaskStateCompleted || code != http.StatusOK || j.State != "completed" || j.CompletedAt == 0 || string(j.Result) != string(ti.Result) {
			t.Fatalf("finished job %s: asynq %+v %v; Vigil %d %+v", id, ti, err, code, j)
		}
		result(t, "finished job answers ("+map[bool]string{true: "via Vigil", false: "via asynq"}[id == vj.ID]+")",
			fmt.Sprintf("completed result=%s", ti.Result), fmt.Sprintf("%d completed_at=%d result=%s", code, j.CompletedAt, j.Result))
	}

	// 6. Pause, Vigil → asynq, and asynq's unpause shows in Vigil.
	v.post("/api/v1/queues/"+q+"/pause?by=compat&reason=test", "", &pr)
	if !pr.Changed || !info().Paused {
		t.Fatalf("Vigil's pause: %+v, asynq paused=%v", pr, info().Paused)
	}
	awaitQueueUpdate(t, events, func(d map[string]any) bool { return d["paused"] == true && d["paused_by"] == "vigil" })
	result(t, "pause by Vigil seen by asynq", fmt.Sprintf("paused=%v", info().Paused), pr.Message)
	if err := insp.UnpauseQueue(q); err != nil {
		t.Fatal(err)
	}
	took = awaitQueueUpdate(t, events, func(d map[string]any) bool { return d["paused"] == false })
	s = stats()
	if s.Paused {
		t.Fatalf("after asynq's unpause Vigil says %+v", s)
	}
	v.post("/api/v1/queues/"+q+"/resume", "", &pr)
	result(t, "unpause by asynq.Inspector shown", "paused=false", fmt.Sprintf("paused=%v; queue_update after %v; resume: %q", s.Paused, took.Round(time.Millisecond), pr.Message))

	// 7. Timeouts: the task's own wins; the pool's (2 s) is for tasks with none.
	own, err := client.Enqueue(asynq.NewTask("compat:deadline", nil), asynq.Queue(q), asynq.Timeout(5*time.Second), asynq.Retention(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	none, err := client.Enqueue(asynq.NewTask("compat:deadline", nil), asynq.Queue(q), asynq.Retention(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		id, name, from string
		lo, hi         int64
		eff            float64
	}{{own.ID, "own Timeout 5s, pool task_timeout 2s", "task", 2000, 5000, 5}, {none.ID, "no Timeout (asynq's 30 min), pool 2s", "pool", 0, 2000, 2}} {
		var ti *asynq.TaskInfo
		v.until(c.name+" done", func() bool {
			ti, err = insp.GetTaskInfo(q, c.id)
			return err == nil && ti.State == asynq.TaskStateCompleted
		})
		var r struct {
			LeftMS int64 `json:"left_ms"`
		}
		_ = json.Unmarshal(ti.Result, &r)
		var j job
		v.get("/api/v1/jobs/"+q+"/"+c.id, &j)
		if r.LeftMS <= c.lo || r.LeftMS > c.hi || j.EffectiveTimeout != c.eff || j.TimeoutSource != c.from {
			t.Fatalf("%s: handler had %d ms; Vigil shows %v s from %s", c.name, r.LeftMS, j.EffectiveTimeout, j.TimeoutSource)
		}
		result(t, "timeout: "+c.name, fmt.Sprintf("task timeout=%v, handler had %d ms", ti.Timeout, r.LeftMS), fmt.Sprintf("effective %vs (%s)", j.EffectiveTimeout, j.TimeoutSource))
	}

	// 8. Unknown task types are retried per MaxRetry, then archived.
	retried, err := client.Enqueue(asynq.NewTask("compat:unknown", nil), asynq.Queue(q), asynq.MaxRetry(1))
	if err != nil {
		t.Fatal(err)
	}
	gone, err := client.Enqueue(asynq.NewTask("compat:unknown", nil), asynq.Queue(q), asynq.MaxRetry(0))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		id    string
		state asynq.TaskState
		name  string
	}{{retried.ID, asynq.TaskStateRetry, "MaxRetry 1: retried"}, {gone.ID, asynq.TaskStateArchived, "MaxRetry 0: archived"}} {
		var ti *asynq.TaskInfo
		v.until("unknown type "+c.name, func() bool {
			ti, err = insp.GetTaskInfo(q, c.id)
			return err == nil && ti.State == c.state
		})
		var j job
		v.get("/api/v1/jobs/"+q+"/"+c.id, &j)
		if !strings.HasPrefix(ti.LastErr, "NO_HANDLER") || j.State != c.state.String() || j.LastError != ti.LastErr {
			t.Fatalf("unknown type %s: asynq %s %q; Vigil %s %q", c.name, ti.State, ti.LastErr, j.State, j.LastError)
		}
		result(t, "unknown task type, "+c.name, fmt.Sprintf("%s %.24q", ti.State, ti.LastErr), fmt.Sprintf("%s %.24q", j.State, j.LastError))
	}

	// 9. Failing tasks: retry counts agree.
	failing, err := client.Enqueue(asynq.NewTask("compat:fail", nil), asynq.Queue(q), asynq.MaxRetry(3))
	if err != nil {
		t.Fatal(err)
	}
	v.until("a failing task in retry", func() bool {
		ti, err := insp.GetTaskInfo(q, failing.ID)
		return err == nil && ti.State == asynq.TaskStateRetry
	})
	var fj job
	v.get("/api/v1/jobs/"+q+"/"+failing.ID, &fj)
	if fj.State != "retry" {
		t.Fatalf("failing task: Vigil says %+v", fj)
	}
	result(t, "failing task (MaxRetry 3)", "retry", fj.State)

	// 10. asynq.Scheduler's tasks are processed like others.
	sched := asynq.NewScheduler(opt, &asynq.SchedulerOpts{LogLevel: asynq.FatalLevel})
	if _, err := sched.Register("@every 1s", asynq.NewTask("compat:ok", []byte(`"scheduled"`)), asynq.Queue(q), asynq.Retention(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := sched.Start(); err != nil {
		t.Fatal(err)
	}
	var schedID string
	v.until("a scheduler task completed", func() bool {
		done, err := insp.ListCompletedTasks(q, asynq.PageSize(100))
		for _, d := range done {
			if err == nil && string(d.Payload) == `"scheduled"` {
				schedID = d.ID
				return true
			}
		}
		return false
	})
	sched.Shutdown()
	var sj job
	code := v.get("/api/v1/jobs/"+q+"/"+schedID, &sj)
	var cl struct{ Jobs []job }
	v.get("/api/v1/queues/"+q+"/jobs?state=completed&page_size=100", &cl)
	if code != http.StatusOK || sj.State != "completed" || !slices.ContainsFunc(cl.Jobs, func(j job) bool { return j.ID == schedID }) {
		t.Fatalf("scheduler task %s: Vigil %d %+v", schedID, code, sj)
	}
	result(t, "asynq.Scheduler task processed", "completed", fmt.Sprintf("%d %s, listed in state=completed", code, sj.State))

	// 11. asynq.Group tasks are aggregated by the pool's aggregator and run.
	for _, p := range []string{"x", "y"} {
		if _, err := client.Enqueue(asynq.NewTask("compat:part", []byte(p)), asynq.Queue(q), asynq.Group("g")); err != nil {
			t.Fatal(err)
		}
	}
	var batchID string
	v.until("the aggregated task completed", func() bool {
		done, err := insp.ListCompletedTasks(q, asynq.PageSize(100))
		for _, d := range done {
			if err == nil && string(d.Payload) == `"batch:g:x,y"` {
				batchID = d.ID
				return true
			}
		}
		return false
	})
	var bj job
	code = v.get("/api/v1/jobs/"+q+"/"+batchID, &bj)
	if code != http.StatusOK || bj.State != "completed" {
		t.Fatalf("aggregated task %s: Vigil %d %+v", batchID, code, bj)
	}
	result(t, "asynq.Group tasks aggregated and run", fmt.Sprintf("completed, payload %s", `"batch:g:x,y"`), fmt.Sprintf("%d %s", code, bj.State))

	// The whole queue, side by side, once more.
	v.until("the counts agree", func() bool {
		in, s := info(), stats()
		return in.Pending == s.Pending && in.Active == s.Running && in.Scheduled == s.Scheduled && in.Retry == s.Retry && in.Aggregating == s.Aggregating &&
			in.Archived == s.Archived && in.Completed == s.Completed && in.ProcessedTotal == s.ProcessedTotal && in.FailedTotal == s.FailedTotal
	})
	in, s = info(), stats()
	result(t, "pending/active/scheduled/retry/archived/completed/aggregating", fmt.Sprintf("%d/%d/%d/%d/%d/%d/%d", in.Pending, in.Active, in.Scheduled, in.Retry, in.Archived, in.Completed, in.Aggregating),
		fmt.Sprintf("%d/%d/%d/%d/%d/%d/%d", s.Pending, s.Running, s.Scheduled, s.Retry, s.Archived, s.Completed, s.Aggregating))
	result(t, "processed_total / failed_total", fmt.Sprintf("%d / %d", in.ProcessedTotal, in.FailedTotal), fmt.Sprintf("%d / %d", s.ProcessedTotal, s.FailedTotal))
}
