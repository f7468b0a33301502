// Command testworker is the supervisor tests' child process. It reads the
// VIGIL_* environment like a real worker and behaves as its first argument
// says:
//
//	beat            heartbeat until SIGTERM, then exit 0 (a failed first
//	                heartbeat is retried, as a real worker's)
//	exit N          exit with code N at once (no heartbeat)
//	beat-exit N     one heartbeat, then exit with code N
//	hang            one heartbeat, then stay alive without beating
//	badbeat         write a heartbeat value that is not a timestamp, every interval
//	nobeat          stay alive, never beat
//	ignore-term     heartbeat, ignore SIGTERM
//	needredis       beat, but exit 1 when the first heartbeat fails (as a
//	                worker that gives up when Redis does not answer)
//	recover D       one heartbeat, then a recovering window of D ("loading"),
//	                then stay alive without beating
//	recover-beat D  one heartbeat, a recovering window of D, then beat on
//
// It writes "ready <pid>" to stdout after its first heartbeat.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/internal/redisconn"
)

func main() {
	if len(os.Args) < 2 {
		fatal("usage: testworker mode [arg]")
	}
	mode, arg := os.Args[1], ""
	if len(os.Args) > 2 {
		arg = os.Args[2]
	}
	if mode == "exit" {
		n, _ := strconv.Atoi(arg)
		os.Exit(n)
	}
	env, err := health.LoadWorkerEnv()
	if err != nil {
		fatal(err.Error())
	}
	rdb, err := redisconn.Open(env.RedisURL)
	if err != nil {
		fatal(err.Error())
	}
	store := health.NewStore(rdb, env.Prefix, 0)
	hb := &health.Heartbeater{Store: store, ID: env.Component, PID: os.Getpid(), Host: env.Host,
		StartedAt: time.Now(), Interval: env.HeartbeatInterval, TTL: env.HeartbeatTTL,
		RecoverMin: env.RecoverMin, RecoverMax: env.RecoverMax}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if mode == "ignore-term" {
		// A worker that outlives its supervisor: SIGPIPE too, or its
		// "ready" line, written after the first heartbeat, kills it when
		// the supervisor died in between (its stdout's reader is gone).
		signal.Ignore(syscall.SIGTERM, syscall.SIGPIPE)
		ctx = context.Background()
	}
	switch mode {
	case "nobeat":
		<-ctx.Done()
		return
	case "badbeat":
		// Every interval, as a broken worker would: a single write could
		// expire before the supervisor's first look at it.
		k := store.Keys().Heartbeat(env.Component)
		for first := true; ; first = false {
			if err := rdb.Set(ctx, k, "not-a-time", env.HeartbeatTTL).Err(); err != nil {
				if ctx.Err() != nil {
					return
				}
				fatal(err.Error())
			}
			if first {
				fmt.Println("ready", os.Getpid())
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(env.HeartbeatInterval):
			}
		}
	}
	if _, err := hb.Beat(ctx); err != nil {
		// A real worker keeps going when Redis is away (DESIGN.md §4.2);
		// beat and ignore-term do too, so that they can be started during
		// an outage.
		if (mode != "beat" && mode != "ignore-term" && mode != "needredis") || errors.Is(err, health.ErrStale) {
			fatal(err.Error())
		}
		if mode == "needredis" {
			fmt.Fprintln(os.Stderr, "testworker: no Redis, giving up:", err)
			os.Exit(1)
		}
		fmt.Fprintln(os.Stderr, "testworker: first heartbeat failed, going on:", err)
	} else {
		fmt.Println("ready", os.Getpid())
	}
	switch mode {
	case "beat-exit":
		n, _ := strconv.Atoi(arg)
		os.Exit(n)
	case "hang":
		<-ctx.Done()
		return
	case "recover", "recover-beat":
		d, err := time.ParseDuration(arg)
		if err != nil {
			fatal(err.Error())
		}
		if _, err := hb.Recover(ctx, d, "loading"); err != nil {
			fatal(err.Error())
		}
		if mode == "recover" {
			<-ctx.Done()
			return
		}
		hb.EndRecovery()
	}
	if err := hb.Run(ctx); err != nil {
		fatal(err.Error())
	}
	if mode == "term-exit" {
		// Dies with code arg on its way out, as a job that crashes the
		// process while it stops would.
		n, _ := strconv.Atoi(arg)
		os.Exit(n)
	}
}

func fatal(msg string) {
	fmt.Fprintln(os.Stderr, "testworker:", msg)
	os.Exit(70)
}
