package chaos_test

import (
	"context"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/queue"
)

// TestToxicJob is scenario 4: a job that kills its worker every time, amid
// 500 good ones, with the default restart policy. It runs exactly
// job_crash_retries + 1 = 3 times and is archived as toxic; every good job
// completes; three crashes are counted and no worker turns failed.
func TestToxicJob(t *testing.T) {
	need(t, modeLong)
	const q = "toxic"
	const workers = 4
	r := newRig(t, q)
	good := r.enqueue(q, 250, 10, 50)
	if _, err := r.client.Enqueue(context.Background(), q, asynq.NewTask("crash", nil), asynq.TaskID("toxic-1"), asynq.Retention(time.Hour)); err != nil {
		t.Fatal(err)
	}
	good = append(good, r.enqueue(q, 250, 10, 50)...)
	spec := r.spec("h1", poolSpec{Queue: q, Workers: workers})
	spec.Policy = policySpec{BackoffBase: 100 * time.Millisecond, BackoffMax: time.Second} // limits: the defaults
	h := startHost(t, spec)

	r.waitDone(good, 2*time.Minute)
	var info *asynq.TaskInfo
	if !r.events.wait(60*time.Second, 200*time.Millisecond, func() bool {
		var err error
		info, err = r.insp.GetTaskInfo(q, "toxic-1")
		return err == nil && info.State == asynq.TaskStateArchived
	}) {
		t.Fatalf("toxic job not archived: %+v", info)
	}
	if info.LastErr != "toxic: worker crashed 3 times" {
		t.Errorf("archived with %q", info.LastErr)
	}
	if runs := r.ledger.runs()["toxic-1"]; runs != 3 {
		t.Errorf("toxic job ran %d times, want 3", runs)
	}
	cs := r.waitHealthy(slots(q, workers), 30*time.Second)
	if n := lifetime(cs); n != 3 {
		t.Errorf("%d restarts counted for 3 crashes: %s", n, describe(cs))
	}
	if n := len(r.events.workers(statusIs(health.StatusFailed))); n > 0 {
		t.Errorf("%d workers failed", n)
	}
	toxic := 0
	r.events.wait(10*time.Second, time.Second, func() bool { toxic = len(r.events.jobs(queue.StateToxic)); return toxic > 0 })
	if toxic != 1 {
		t.Errorf("%d toxic events", toxic)
	}
	if v := r.ledger.violations(); len(v) > 0 {
		t.Errorf("tasks ran in two handlers at once: %v", v)
	}
	tl := r.ledger.judge(good, nil, nil)
	if tl.lost > 0 {
		t.Errorf("%d good jobs lost", tl.lost)
	}
	infoQ := r.waitAsynqSettled(q, len(good), 30*time.Second)
	if infoQ.Archived != 1 {
		t.Errorf("asynq archived %d tasks, want the toxic one", infoQ.Archived)
	}
	h.term(spec.StopTimeout + 5*time.Second)
	result(t, "good_jobs=%d completed=%d lost=%d duplicated=%d toxic_runs=3 archived=1 restarts_counted=%d failed_workers=0",
		len(good), len(good)-tl.lost, tl.lost, tl.duplicated, lifetime(cs))
}
