// Command testworker is the supervisor tests' child process. It reads the
// VIGIL_* environment like a real worker and behaves as its first argument
// says:
//
//	beat            heartbeat until SIGTERM, then exit 0 (a failed first
//	                heartbeat is retried, as a real worker's); SIGUSR1 quiets
//	                it once the beat under way has had its replies (it
//	                prints "quiet <pid>"), SIGUSR2 lets it beat again
//	exit N          exit with code N at once (no heartbeat)
//	beat-exit N     one heartbeat, then exit with code N
//	hang            one heartbeat, then stay alive without beating
//	badbeat         write a heartbeat value that is not a timestamp, every interval
//	nobeat          stay alive, never beat
//	ignore-term     heartbeat, ignore SIGTERM
//	term-exit N     heartbeat until SIGTERM, then exit with code N (a job
//	                that crashes the process on its way out)
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
	"sync"
	"syscall"
	"time"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/internal/clock"
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
	if mode == "beat" {
		hb.Clock = newGate()
	}
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
		// A real worker keeps going when Redis is away (docs/design.md §4.2);
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

// gate is the heartbeater's clock in beat mode. A test that deletes a
// worker's keys needs no beat of the worker's in flight, or the beat may
// reach Redis after the delete and write them again: SIGUSR1 holds the next
// beat back, and the first beat the heartbeater schedules after it (its
// beat under way has had its replies) prints "quiet <pid>". SIGUSR2 lets
// the held beat go.
type gate struct {
	clock.Real
	mu    sync.Mutex
	quiet bool
	held  func()
}

func newGate() *gate {
	g := &gate{}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGUSR1, syscall.SIGUSR2)
	go func() {
		for s := range sig {
			g.mu.Lock()
			g.quiet = s == syscall.SIGUSR1
			if f := g.held; !g.quiet && f != nil {
				g.held = nil
				go f()
			}
			g.mu.Unlock()
		}
	}()
	return g
}

func (g *gate) AfterFunc(d time.Duration, f func()) clock.Timer {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.quiet {
		return time.AfterFunc(d, f)
	}
	if g.held == nil {
		fmt.Println("quiet", os.Getpid())
	}
	g.held = f
	return heldTimer{g}
}

// heldTimer is the timer of a beat held back while quiet.
type heldTimer struct{ g *gate }

func (t heldTimer) Stop() bool {
	t.g.mu.Lock()
	defer t.g.mu.Unlock()
	held := t.g.held != nil
	t.g.held = nil
	return held
}
