// Command testsupervisor runs a Supervisor in a process of its own, for the
// supervisor tests that SIGKILL a supervisor and check that its children
// do not outlive it (docs/design.md §4.1, §4.6).
//
//	testsupervisor -redis URL -prefix P -worker PATH [-mode M] [-workers N] [-stop-timeout D] [-host H -lease D -interval D -ttl D -cluster]
//
// It runs N workers of queue q, each `PATH M` (M: beat unless told), prints "pids <p1> <p2> …"
// on stdout once every one is healthy, and runs until SIGTERM or SIGINT.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/internal/redisconn"
	"github.com/vigil-dev/vigil/queue"
	"github.com/vigil-dev/vigil/supervisor"
)

func main() {
	url := flag.String("redis", "", "Redis URL")
	prefix := flag.String("prefix", "", "key prefix")
	worker := flag.String("worker", "", "path of the testworker binary")
	mode := flag.String("mode", "beat", "the testworker's mode")
	n := flag.Int("workers", 3, "workers of queue q")
	stopTimeout := flag.Duration("stop-timeout", 2*time.Second, "stop_timeout")
	host := flag.String("host", "orphan", "host id")
	lease := flag.Duration("lease", 0, "slot lease (0 = default)")
	interval := flag.Duration("interval", 100*time.Millisecond, "heartbeat interval")
	ttl := flag.Duration("ttl", time.Second, "heartbeat TTL")
	cluster := flag.Bool("cluster", false, "cluster member: print \"started\" once running instead of waiting for every worker")
	queueName := flag.String("queue", "q", "the pool's queue")
	recoverTasks := flag.Bool("recover", false, "requeue a dead worker's tasks (queue.Recoverer)")
	flag.Parse()
	hb := supervisor.Heartbeat{Interval: *interval, TTL: *ttl}
	// A mode with an argument ("term-exit 3") is split into words.
	cmd := append([]string{*worker}, strings.Fields(*mode)...)
	if err := run(*url, *prefix, cmd, *queueName, *host, *n, *stopTimeout, *lease, hb, *cluster, *recoverTasks); err != nil {
		fmt.Fprintln(os.Stderr, "testsupervisor:", err)
		os.Exit(1)
	}
}

func run(url, prefix string, worker []string, q, host string, n int, stopTimeout, lease time.Duration, hb supervisor.Heartbeat, cluster, recoverTasks bool) error {
	rdb, err := redisconn.Open(url)
	if err != nil {
		return err
	}
	defer rdb.Close()
	store := health.NewStore(rdb, prefix, 0)
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	cfg := supervisor.Config{
		Host: host, RedisURL: url, Prefix: prefix, Lease: lease,
		Pools:       []supervisor.Pool{{Queue: q, Workers: n, Command: worker}},
		Heartbeat:   hb,
		StopTimeout: stopTimeout,
		Logger:      logger,
	}
	if recoverTasks {
		cfg.Recoverer = queue.NewRecoverer(store, queue.RecovererConfig{Logger: logger})
	}
	sup, err := supervisor.New(cfg, store)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := sup.Start(ctx); err != nil {
		return err
	}
	defer sup.Stop(context.Background())
	if cluster {
		fmt.Println("started")
		<-ctx.Done()
		return nil
	}
	pids, err := waitHealthy(ctx, store, q, n)
	if err != nil {
		return err
	}
	fmt.Println("pids", strings.Join(pids, " "))
	<-ctx.Done()
	return nil
}

// waitHealthy blocks on the event stream until the n workers are healthy
// and returns their pids.
func waitHealthy(ctx context.Context, store *health.Store, q string, n int) ([]string, error) {
	ids := make([]health.ComponentID, n)
	for i := range ids {
		ids[i] = health.ComponentID{Queue: q, Slot: i}
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	last := "0-0"
	for {
		cs, err := store.GetMany(ctx, ids)
		if err != nil {
			return nil, err
		}
		var pids []string
		for _, c := range cs {
			if c.Status == health.StatusHealthy {
				pids = append(pids, strconv.Itoa(c.PID))
			}
		}
		if len(pids) == n {
			return pids, nil
		}
		res, err := store.Client().XRead(ctx, &redis.XReadArgs{
			Streams: []string{store.Keys().Events(), last}, Block: time.Second, Count: 100,
		}).Result()
		switch {
		case errors.Is(err, redis.Nil):
		case err != nil:
			return nil, fmt.Errorf("wait for healthy workers: %w", err)
		default:
			for _, s := range res {
				for _, m := range s.Messages {
					last = m.ID
				}
			}
		}
	}
}
