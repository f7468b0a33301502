package queue_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/vigil-dev/vigil/queue"
)

// TestHandlerBeginsOnlyOnRecord (fault explorer E39, seed 110816): Redis
// goes away between a task's dequeue and its running record. A handler
// that began with its record held in memory and crashed the process left
// no trace of its run in Redis: the requeue found it never ran, counted
// no crash, and a toxic task ran once more than job_crash_retries allows.
// The handler waits for its record: when it begins, the record is in
// Redis.
func TestHandlerBeginsOnlyOnRecord(t *testing.T) {
	e := newQEnv(t)
	cfg := e.config(0)
	p := e.viaProxy(&cfg)
	var once sync.Once
	queue.SetTestHooks(&cfg, nil, func(got bool) {
		if got { // the dequeue's reply is in: Redis goes away before the record
			once.Do(func() {
				p.Refuse(true)
				p.Cut()
			})
		}
	})
	onRecord := make(chan bool, 1)
	e.runWorker(cfg, map[string]asynq.Handler{
		"check": asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error {
			id, _ := asynq.GetTaskID(ctx)
			in, err := e.Client.HExists(context.Background(), e.store.Keys().Running(cfg.Env.Component), id).Result()
			onRecord <- err == nil && in
			return nil
		}),
	})
	unreachable := e.logs.waitFor("redis unreachable")
	id := e.enqueue(e.client(), "check", "", asynq.Retention(time.Hour))
	timer := time.NewTimer(waitTimeout)
	defer timer.Stop()
	select {
	case in := <-onRecord:
		t.Fatalf("the handler began while Redis was away (its running record in Redis: %v)", in)
	case <-unreachable:
	case <-timer.C:
		t.Fatal("the worker never found Redis away")
	}
	// The record's round trip gave up and the record is held: a handler
	// that does not wait begins at once. Two failed heartbeats later
	// (100 ms apart) it has, or it waits.
	for cfg.Metrics.RecordsHeld.Load() == 0 {
		select {
		case in := <-onRecord:
			t.Fatalf("the handler began while Redis was away (its running record in Redis: %v)", in)
		case <-timer.C:
			t.Fatal("the running record was never held")
		case <-time.After(10 * time.Millisecond): // polling a gauge
		}
	}
	for beats := strings.Count(e.logs.String(), "heartbeat failed"); strings.Count(e.logs.String(), "heartbeat failed") < beats+2; {
		select {
		case in := <-onRecord:
			t.Fatalf("the handler began while Redis was away (its running record in Redis: %v)", in)
		case <-timer.C:
			t.Fatal("no two failed heartbeats while Redis was away")
		case <-time.After(10 * time.Millisecond): // polling the log
		}
	}
	p.Refuse(false)
	if !receive(t, onRecord) {
		t.Fatal("the handler began without its running record in Redis")
	}
	e.waitState(id, asynq.TaskStateCompleted, waitTimeout)
}
