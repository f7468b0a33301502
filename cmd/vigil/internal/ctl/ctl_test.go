package ctl_test

import (
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/vigil-dev/vigil/cmd/vigil/internal/ctl"
	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/policy"
)

func TestStatus(t *testing.T) {
	l := newLive(t)
	l.must([]string{"status: healthy", "workers: 2 (healthy 2)", "paused: no", "jobs:"}, "status")
	var v struct {
		Health struct{ Status string } `json:"health"`
		Queues struct {
			Queues []struct{ Queue string } `json:"queues"`
		} `json:"queues"`
	}
	decode(t, l.must(nil, "status", "--json"), &v)
	if v.Health.Status != "healthy" || len(v.Queues.Queues) != 1 || v.Queues.Queues[0].Queue != "tag" {
		t.Fatalf("status --json: %+v", v)
	}
}

func TestWorkers(t *testing.T) {
	l := newLive(t)
	out := l.must([]string{"COMPONENT", "STATUS", "worker:tag:0", "worker:tag:1", "healthy", "h1"}, "workers")
	if n := strings.Count(out, "\n"); n != 3 {
		t.Fatalf("want a header and 2 rows:\n%s", out)
	}
	var v struct {
		Workers []struct{ Component, Status string } `json:"workers"`
	}
	decode(t, l.must(nil, "--json", "workers"), &v)
	if len(v.Workers) != 2 || v.Workers[1].Component != "worker:tag:1" || v.Workers[1].Status != "healthy" {
		t.Fatalf("workers --json: %+v", v)
	}
}

func TestQueuesPauseResume(t *testing.T) {
	l := newLive(t)
	l.must([]string{"QUEUE", "PAUSED", "tag", "(total)"}, "queues")
	l.must([]string{"tag", "paused"}, "pause", "tag")
	if out := l.must(nil, "queues"); !strings.Contains(lineOf(out, "tag "), "yes") {
		t.Fatalf("tag not shown paused:\n%s", out)
	}
	l.must([]string{"already"}, "pause", "tag") // pausing a paused queue says so
	l.must([]string{"resumed"}, "resume", "tag")
	l.must(nil, "pause")
	out := l.must([]string{"global pause: on"}, "queues")
	if !strings.Contains(lineOf(out, "tag "), "yes") {
		t.Fatalf("tag not paused by the global pause:\n%s", out)
	}
	var v struct {
		Paused, Changed bool
	}
	decode(t, l.must(nil, "resume", "--json"), &v)
	if v.Paused || !v.Changed {
		t.Fatalf("resume --json: %+v", v)
	}
	l.must([]string{"paused: no"}, "status")
	// Unknown queue: the server's 404, said.
	code, _, errs := l.ctl("pause", "nosuch")
	if code != 1 || !strings.Contains(errs, "404") {
		t.Fatalf("pause nosuch: exit %d, %s", code, errs)
	}
}

func TestRestartAndReset(t *testing.T) {
	l := newLive(t)
	before, _ := l.store.Get(t.Context(), health.ComponentID{Queue: "tag", Slot: 0})
	l.must([]string{"worker:tag:0", "starting"}, "restart", "worker:tag:0")
	l.waitWorkers(health.StatusHealthy, 0)
	after, _ := l.store.Get(t.Context(), health.ComponentID{Queue: "tag", Slot: 0})
	if after.PID == before.PID {
		t.Fatal("restart kept the same process")
	}
	// A running worker cannot be reset: the server's 409, said.
	code, _, errs := l.ctl("reset", "worker:tag:1")
	if code != 1 || !strings.Contains(errs, "409") {
		t.Fatalf("reset of a running worker: exit %d, %s", code, errs)
	}
	l.post("/api/v1/workers/worker:tag:1/stop")
	l.waitWorkers(health.StatusStopped, 1)
	l.must([]string{"worker:tag:1", "stopped"}, "reset", "worker:tag:1")
	l.must([]string{"starting"}, "reset", "worker:tag:1", "--restart")
	l.waitWorkers(health.StatusHealthy, 1)
	code, _, errs = l.ctl("restart", "worker:nosuch:0")
	if code != 1 || !strings.Contains(errs, "404") {
		t.Fatalf("restart of an unknown worker: exit %d, %s", code, errs)
	}
}

func TestAuthAndUsage(t *testing.T) {
	l := newLive(t)
	// Reads are open without auth_reads; a mutation without the token is refused.
	code, _, errs := runCtl(t, map[string]string{ctl.EnvServer: l.url}, "pause")
	if code != 1 || !strings.Contains(errs, "401") || !strings.Contains(errs, "VIGIL_TOKEN") {
		t.Fatalf("pause without a token: exit %d, %s", code, errs)
	}
	// --token and --server win over the environment.
	code, out, errs := runCtl(t, map[string]string{ctl.EnvServer: "http://127.0.0.1:1", ctl.EnvToken: "wrong"},
		"--server", l.url, "--token", token, "pause", "tag")
	if code != 0 || !strings.Contains(out, "paused") {
		t.Fatalf("flags over env: exit %d, %s %s", code, out, errs)
	}
	for _, args := range [][]string{{}, {"bogus"}, {"restart"}, {"pause", "a", "b"}, {"--nope", "status"}} {
		if code, _, _ := l.ctl(args...); code != 2 {
			t.Errorf("vigil ctl %v: exit %d, want 2", args, code)
		}
	}
	code, _, errs = runCtl(t, map[string]string{ctl.EnvServer: "http://127.0.0.1:1"}, "status")
	if code != 1 || !strings.Contains(errs, "cannot reach vigil at http://127.0.0.1:1") {
		t.Fatalf("unreachable: exit %d, %s", code, errs)
	}
}

func lineOf(out, prefix string) string {
	for l := range strings.SplitSeq(out, "\n") {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	return ""
}

// TestResumeAsynqPause: a queue paused with asynq's own Inspector shows
// paused by asynq, and `vigil ctl resume` says it lifted asynq's pause.
func TestResumeAsynqPause(t *testing.T) {
	l := newLive(t)
	insp := asynq.NewInspectorFromRedisClient(l.rdb)
	if err := insp.PauseQueue("tag"); err != nil {
		t.Fatal(err)
	}
	if out := l.must(nil, "queues"); !strings.Contains(lineOf(out, "tag "), "yes (asynq)") {
		t.Fatalf("asynq's pause not shown:\n%s", out)
	}
	l.must([]string{"paused: tag (asynq)"}, "status")
	l.must([]string{"paused by asynq's tools; resumed"}, "resume", "tag")
	l.must([]string{"was not paused"}, "resume", "tag")
	l.must([]string{"tag paused"}, "pause", "tag", "--reason", "deploy")
	var q struct {
		Queues []struct {
			PausedBy    string `json:"paused_by"`
			PauseReason string `json:"pause_reason"`
		}
	}
	decode(t, l.must(nil, "queues", "--json"), &q)
	if len(q.Queues) != 1 || q.Queues[0].PausedBy != "vigil" || q.Queues[0].PauseReason != "deploy" {
		t.Fatalf("queues --json: %+v", q)
	}
	if err := insp.UnpauseQueue("tag"); err != nil {
		t.Fatal(err)
	}
	l.must([]string{"asynq's tools had already resumed it"}, "resume", "tag")
}

// pause worker:<queue>:<slot> pauses that worker only; resume lifts it.
func TestPauseOneWorker(t *testing.T) {
	l := newLive(t)
	l.must([]string{"worker:tag:0 paused", "no new task"}, "pause", "worker:tag:0", "--reason", "disk check")
	l.must([]string{"already"}, "pause", "worker:tag:0")
	var a struct {
		Worker struct {
			Paused      bool   `json:"paused"`
			PauseReason string `json:"pause_reason"`
		} `json:"worker"`
	}
	decode(t, l.must(nil, "pause", "worker:tag:0", "--json"), &a)
	if !a.Worker.Paused || a.Worker.PauseReason != "disk check" {
		t.Fatalf("pause --json: %+v", a)
	}
	if out := l.must(nil, "queues"); strings.Contains(lineOf(out, "tag "), "yes") {
		t.Fatalf("a worker's pause paused its queue:\n%s", out)
	}
	l.must([]string{"worker:tag:0 resumed"}, "resume", "worker:tag:0")
	if code, _, errs := l.ctl("pause", "worker:tag:99"); code != 1 || !strings.Contains(errs, "404") {
		t.Fatalf("pause an unknown worker: exit %d, %s", code, errs)
	}
}

// remove: a worker within its pool is the server's 409; one left beyond it
// (a stopped record no host holds) is removed, its history said.
func TestRemove(t *testing.T) {
	l := newLive(t)
	code, _, errs := l.ctl("remove", "worker:tag:0")
	if code != 1 || !strings.Contains(errs, "409") {
		t.Fatalf("remove within the pool: exit %d, %s", code, errs)
	}
	left := health.ComponentID{Queue: "tag", Slot: 5}
	if _, err := l.store.Write(t.Context(), health.Component{ID: left, Status: health.StatusStopped, Reason: "pool shrink",
		UpdatedAt: time.Now(), Restarts: policy.State{LifetimeRestarts: 3}}, health.Write{NoCheck: true, NoEvent: true, Index: true, Restarts: true}); err != nil {
		t.Fatal(err)
	}
	l.must([]string{"worker:tag:5 removed", "was stopped", "3 restarts"}, "remove", "worker:tag:5")
	if _, err := l.store.Get(t.Context(), left); err == nil {
		t.Fatal("record still there")
	}
	code, _, errs = l.ctl("remove", "worker:tag:5")
	if code != 1 || !strings.Contains(errs, "404") {
		t.Fatalf("remove again: exit %d, %s", code, errs)
	}
}
