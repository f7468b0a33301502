// Command vigilhost is one host of the fault explorer: a Supervisor with
// its own host id, instance and Redis client, in a process of its own so
// that the explorer can SIGKILL it. Its configuration (hostproto.Config,
// JSON) is its only argument; it takes operator actions on stdin and
// answers on stdout (package hostproto). On a shutdown request, stdin's
// end, SIGTERM or SIGINT it stops the supervisor gracefully, closes its
// Redis client, reports the goroutines left behind and exits.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"sync"
	"syscall"
	"time"

	"go.uber.org/goleak"

	"github.com/vigil-dev/vigil/explore/internal/hostproto"
	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/internal/redisconn"
	"github.com/vigil-dev/vigil/queue"
	"github.com/vigil-dev/vigil/schedule"
	"github.com/vigil-dev/vigil/supervisor"
)

// envTestLeak makes the host leave a goroutine behind: the explorer's test
// that invariant 8 can fail.
const envTestLeak = "VIGILHOST_TEST_LEAK"

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: vigilhost CONFIG-JSON")
		os.Exit(2)
	}
	var cfg hostproto.Config
	if err := json.Unmarshal([]byte(os.Args[1]), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "vigilhost: config:", err)
		os.Exit(2)
	}
	os.Exit(run(cfg))
}

// out writes one message a line.
type out struct {
	mu  sync.Mutex
	enc *json.Encoder
}

func (o *out) send(m hostproto.Message) {
	o.mu.Lock()
	defer o.mu.Unlock()
	_ = o.enc.Encode(m)
}

func run(cfg hostproto.Config) int {
	o := &out{enc: json.NewEncoder(os.Stdout)}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	fail := func(err error) int {
		log.Error("vigilhost", "err", err)
		o.send(hostproto.Message{Ev: hostproto.EvFailed, Err: err.Error()})
		return 1
	}
	rdb, err := redisconn.Open(cfg.RedisURL)
	if err != nil {
		return fail(err)
	}
	store := health.NewStore(rdb, cfg.Prefix, 0)
	pools := make([]supervisor.Pool, len(cfg.Pools))
	queues := make([]string, len(cfg.Pools))
	for i, p := range cfg.Pools {
		pools[i] = supervisor.Pool{Queue: p.Queue, Workers: p.Workers, Command: p.Command,
			Concurrency: p.Concurrency, TaskTimeout: p.TaskTimeout, Env: p.Env}
		queues[i] = p.Queue
	}
	// The leader fires the schedules, as in vigil serve (sched is set
	// before the supervisor starts, which calls OnLeader).
	schedules := schedule.NewStore(store, schedule.StoreConfig{Host: cfg.Host, Logger: log})
	sched := schedule.New(store, schedule.Config{Host: cfg.Host, Logger: log,
		Restore: func(ctx context.Context) (bool, error) {
			return schedules.ApplyConfig(ctx, slices.Clone(cfg.Schedules))
		}})
	sup, err := supervisor.New(supervisor.Config{
		Host: cfg.Host, RedisURL: cfg.RedisURL, Prefix: cfg.Prefix, Pools: pools,
		Lease: cfg.Lease, StopTimeout: cfg.StopTimeout, OpTimeout: cfg.OpTimeout,
		Heartbeat: supervisor.Heartbeat{Interval: cfg.Interval, TTL: cfg.TTL, StartTimeout: cfg.StartTimeout},
		Policy:    cfg.Policy,
		Recoverer: queue.NewRecoverer(store, queue.RecovererConfig{Logger: log}),
		Logger:    log,
		OnLeader:  func(leading bool, until time.Time) { sched.Leading(leading, until) },
	}, store)
	if err != nil {
		_ = rdb.Close()
		return fail(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	err = queue.NewControl(store).Apply(ctx, queues) // as vigil serve does
	if err == nil {
		_, err = schedules.ApplyConfig(ctx, slices.Clone(cfg.Schedules))
	}
	if err != nil {
		supervisor.KillFrozenOrphans(cfg.Host, cfg.RedisURL, store.Keys().Prefix, log) // as vigil serve does
	}
	if err == nil {
		sched.Start()
		err = sup.Start(ctx)
	}
	cancel()
	if err != nil {
		_ = sup.Stop(context.Background())
		sched.Stop()
		_ = rdb.Close()
		return fail(err)
	}
	o.send(hostproto.Message{Ev: hostproto.EvStarted, Instance: sup.Config().Instance})
	if os.Getenv(envTestLeak) != "" { // the explorer's own test of its leak check
		go func() { select {} }()
	}

	lagDone := make(chan struct{})
	go watchLag(o, lagDone)
	defer close(lagDone)

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	reqs := make(chan hostproto.Request)
	go readRequests(reqs)

	var inflight sync.WaitGroup
	var shutdown hostproto.Request
wait:
	for {
		select {
		case <-sigs:
			break wait
		case r, ok := <-reqs:
			if !ok {
				break wait
			}
			if r.Op == hostproto.OpShutdown {
				shutdown = r
				break wait
			}
			inflight.Add(1)
			go func() {
				defer inflight.Done()
				o.send(act(sup, r))
			}()
		}
	}
	signal.Stop(sigs)
	timeout := shutdown.Timeout
	if timeout <= 0 {
		timeout = cfg.StopTimeout + 2*time.Second
	}
	sctx, scancel := context.WithTimeout(context.Background(), timeout)
	began := time.Now()
	err = sup.Stop(sctx)
	took := time.Since(began)
	scancel()
	sched.Stop()
	// Actions in flight end with the supervisor: wait for them (a while).
	answered := make(chan struct{})
	go func() {
		inflight.Wait()
		close(answered)
	}()
	unanswered := 0
	select {
	case <-answered:
	case <-time.After(cfg.StopTimeout + 2*time.Second):
		unanswered = 1
	}
	_ = rdb.Close()
	msg := hostproto.Message{Ev: hostproto.EvStopped, ID: shutdown.ID, Took: took, Unanswered: unanswered}
	if err != nil {
		msg.Err = err.Error()
	}
	if unanswered == 0 {
		// go-redis's dial probe of a pool whose server is down sleeps a
		// second between tries and sees the pool closed only then: give
		// goroutines 3 s to end (goleak's own retries, ~0.4 s, would take
		// it for a leak when a host stops while a Cluster master is dead;
		// the explorer's replay list, explore/testdata/seeds.txt, holds
		// it).
		for deadline := time.Now().Add(3 * time.Second); ; {
			lerr := goleak.Find(goleak.IgnoreTopFunction("main.readRequests"),
				goleak.IgnoreAnyFunction("main.readRequests"),
				goleak.IgnoreAnyFunction("main.watchLag"),
				goleak.IgnoreAnyFunction("os/signal.loop"),
				goleak.IgnoreAnyFunction("os/signal.signal_recv"))
			if lerr == nil {
				break
			}
			if time.Now().After(deadline) {
				msg.Leaks = lerr.Error()
				break
			}
		}
	}
	o.send(msg)
	return 0
}

// lagLimit is how late the host's own ticker may wake before it says so:
// a supervisor starved of CPU that long misses its ticks (a lease is 1 s
// in the explorer), which the explorer must not take for a defect.
const lagLimit = 250 * time.Millisecond

// watchLag reports, at most once a second, that the process woke late.
func watchLag(o *out, done <-chan struct{}) {
	const every = 50 * time.Millisecond
	t := time.NewTicker(every)
	defer t.Stop()
	last, reported := time.Now(), time.Time{}
	for {
		select {
		case <-done:
			return
		case now := <-t.C:
			if late := now.Sub(last) - every; late > lagLimit && now.Sub(reported) > time.Second {
				o.send(hostproto.Message{Ev: hostproto.EvLag, Took: late})
				reported = now
			}
			last = now
		}
	}
}

// readRequests reads stdin until it ends.
func readRequests(reqs chan<- hostproto.Request) {
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		var r hostproto.Request
		if json.Unmarshal(sc.Bytes(), &r) == nil {
			reqs <- r
		}
	}
	close(reqs)
}

// act runs one operator action and answers it.
func act(sup *supervisor.Supervisor, r hostproto.Request) hostproto.Message {
	timeout := r.Timeout
	if timeout <= 0 {
		timeout = time.Minute
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	began := time.Now()
	var rec health.Component
	var err error
	switch r.Op {
	case hostproto.OpRestart, hostproto.OpStop, hostproto.OpReset:
		var id health.ComponentID
		id, err = health.ParseComponentID(r.Component)
		if err != nil {
			break
		}
		switch r.Op {
		case hostproto.OpRestart:
			rec, err = sup.Restart(ctx, id)
		case hostproto.OpStop:
			rec, err = sup.StopComponent(ctx, id)
		default:
			rec, err = sup.Reset(ctx, id, r.Restart)
		}
	case hostproto.OpRolling:
		_, err = sup.RollingRestart(ctx, r.Queue)
	default:
		err = errors.New("unknown op " + r.Op)
	}
	m := hostproto.Message{Ev: hostproto.EvReply, ID: r.ID, Took: time.Since(began), Status: string(rec.Status)}
	if err != nil {
		m.Err = err.Error()
	}
	return m
}
