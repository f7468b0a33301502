package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/internal/testredis"
	"github.com/vigil-dev/vigil/queue"
	"github.com/vigil-dev/vigil/supervisor"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestExampleUnderASupervisor builds the example, runs it as a pool and
// sends it a task.
func TestExampleUnderASupervisor(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "worker")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		t.Fatal(err)
	}
	env := testredis.New(t)
	q := "thumbs" + env.Prefix[2:len(env.Prefix)-1]
	t.Cleanup(func() {
		if env.Mini == nil {
			keys, _ := env.Client.Keys(context.Background(), "asynq:{"+q+"}:*").Result()
			if len(keys) > 0 {
				env.Client.Del(context.Background(), keys...)
			}
			env.Client.SRem(context.Background(), "asynq:queues", q)
		}
	})
	store := health.NewStore(env.Client, env.Prefix, 0)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	sup, err := supervisor.New(supervisor.Config{
		Host: "h1", RedisURL: env.URL, Prefix: env.Prefix,
		Pools:       []supervisor.Pool{{Queue: q, Workers: 1, Command: []string{bin}, Concurrency: 2}},
		Heartbeat:   supervisor.Heartbeat{Interval: 100 * time.Millisecond, TTL: 3 * time.Second},
		StopTimeout: 2 * time.Second,
		Recoverer:   queue.NewRecoverer(store, queue.RecovererConfig{Logger: log}),
		Logger:      log,
	}, store)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := sup.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer sup.Stop(ctx)
	payload, _ := json.Marshal(resizeRequest{Image: "x", Sizes: []int{64, 128}})
	c := queue.NewClient(store, queue.ClientConfig{Queues: []string{q}, Logger: log})
	info, err := c.Enqueue(ctx, q, asynq.NewTask("thumbs:resize", payload))
	if err != nil {
		t.Fatal(err)
	}
	last := "0"
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		res, err := env.Client.XRead(ctx, &redis.XReadArgs{Streams: []string{store.Keys().Events(), last}, Block: time.Second}).Result()
		if err != nil && err != redis.Nil {
			t.Fatal(err)
		}
		for _, s := range res {
			for _, m := range s.Messages {
				last = m.ID
				var ev health.Event
				_ = json.Unmarshal([]byte(m.Values["data"].(string)), &ev)
				if ev.Topic != queue.JobTopic(q, info.ID) {
					continue
				}
				je, _ := queue.DecodeJobEvent(ev)
				switch je.State {
				case queue.StateDone:
					return
				case queue.StateError:
					t.Fatalf("task failed: %+v", je)
				}
			}
		}
	}
	t.Fatal("the example worker did not complete the task")
}
