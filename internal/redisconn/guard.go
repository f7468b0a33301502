package redisconn

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Holding writes through a Sentinel failover (TestFailoverGuardEvents;
// failover's TestFailover, sentinel scenarios). Between the
// moment a sentinel promotes the replica (SLAVEOF NO ONE) and the moment
// it announces the new master (+switch-master, about 0.9 s later here),
// the old master still takes writes, from every client that has not
// heard yet; the sentinel makes it a replica of the new one seconds later,
// and what it took then is gone: an enqueue answered 201 is lost, a
// dequeue or a completion written there is unknown to the new master,
// which hands the job out again. A Sentinel client Open makes listens to
// its sentinels' events and holds every command from the promotion
// (+selected-slave, +failover-state-send-slaveof-noone) until the switch
// (+switch-master, then guardSettle for go-redis's own listener to move
// its pool), a failover abort, or guardMax: a failover costs a second of
// waiting instead of lost writes.
//
// A client opened while a failover is under way heard none of its events:
// its first commands wait (at most guardReady) until one of its sentinels
// answered whether a failover of the master is in progress, and hold if
// one is: a host restarted during a manual failover would otherwise write
// its completions to the old master
// (TestGuardHoldsAClientOpenedDuringAFailover).
const (
	guardMax    = 5 * time.Second
	guardSettle = 50 * time.Millisecond
	guardReady  = 500 * time.Millisecond
)

// logger is where redisconn logs its own lines (SetLogger sets it).
var logger atomic.Pointer[slog.Logger]

func log() *slog.Logger {
	if l := logger.Load(); l != nil {
		return l
	}
	return slog.Default()
}

// failoverGuard holds commands while a failover of its master is under way.
type failoverGuard struct {
	master string

	mu   sync.Mutex
	held chan struct{} // non-nil while holding; closed on release
	gen  int           // which hold a release timer belongs to

	// ready is closed once a sentinel said whether a failover was under
	// way when the client was opened (or guardReady passed).
	ready     chan struct{}
	readyOnce sync.Once

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func newFailoverGuard(o *redis.FailoverOptions) *failoverGuard {
	ctx, cancel := context.WithCancel(context.Background())
	g := &failoverGuard{master: o.MasterName, cancel: cancel, ready: make(chan struct{})}
	time.AfterFunc(guardReady, g.markReady)
	for _, a := range o.SentinelAddrs {
		g.wg.Go(func() { g.listen(ctx, a, o) })
	}
	return g
}

// stop ends the listeners and lets held commands go.
func (g *failoverGuard) stop() {
	g.cancel()
	g.wg.Wait()
	g.release("client closed")
}

func (g *failoverGuard) listen(ctx context.Context, addr string, o *redis.FailoverOptions) {
	sc := redis.NewSentinelClient(&redis.Options{Addr: addr, Username: o.SentinelUsername, Password: o.SentinelPassword,
		TLSConfig: o.TLSConfig, DialTimeout: o.DialTimeout})
	defer sc.Close()
	ps := sc.PSubscribe(ctx, "*")
	defer ps.Close()
	// Subscribed first, then asked: a failover that begins in between is
	// seen by its events, one under way already by the master's flags.
	if _, err := ps.Receive(ctx); err == nil {
		if m, err := sc.Master(ctx, g.master).Result(); err == nil && hasFlag(m["flags"], "failover_in_progress") {
			g.hold("failover under way when the client was opened (" + m["failover-state"] + ")")
		}
		g.markReady()
	}
	ch := ps.Channel()
	for {
		select {
		case <-ctx.Done():
			return
		case m, ok := <-ch:
			if !ok {
				return
			}
			g.event(m.Channel, m.Payload)
		}
	}
}

// event acts on one sentinel event about this guard's master.
func (g *failoverGuard) event(channel, payload string) {
	if !g.about(channel, payload) {
		return
	}
	switch {
	case channel == "+selected-slave" || channel == "+failover-state-send-slaveof-noone":
		g.hold(channel)
	case channel == "+switch-master":
		time.AfterFunc(guardSettle, func() { g.release("new master announced") })
	case strings.HasPrefix(channel, "-failover-abort"):
		g.release("failover aborted (" + channel + ")")
	}
}

// about reports whether an event concerns this guard's master: its payload
// is "<name> …" (+switch-master), "master <name> …", or "… @ <name> …".
func (g *failoverGuard) about(channel, payload string) bool {
	f := strings.Fields(payload)
	switch {
	case channel == "+switch-master":
		return len(f) > 0 && f[0] == g.master
	case len(f) >= 2 && f[0] == "master" && f[1] == g.master:
		return true
	}
	for i, w := range f {
		if w == "@" && i+1 < len(f) && f[i+1] == g.master {
			return true
		}
	}
	return false
}

func (g *failoverGuard) hold(why string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.held != nil {
		return
	}
	g.held = make(chan struct{})
	g.gen++
	gen := g.gen
	time.AfterFunc(guardMax, func() {
		g.mu.Lock()
		stale := g.gen != gen
		g.mu.Unlock()
		if !stale {
			g.release("no switch within " + guardMax.String())
		}
	})
	log().Warn("redis sentinel: failover of the master under way: commands wait for the new master",
		"master", g.master, "event", why, "lib", "vigil")
}

func (g *failoverGuard) release(why string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.held == nil {
		return
	}
	close(g.held)
	g.held = nil
	g.gen++
	log().Info("redis sentinel: commands go on", "master", g.master, "why", why, "lib", "vigil")
}

func (g *failoverGuard) markReady() {
	g.readyOnce.Do(func() { close(g.ready) })
}

// hasFlag reports whether the comma-separated flags hold f.
func hasFlag(flags, f string) bool {
	for x := range strings.SplitSeq(flags, ",") {
		if x == f {
			return true
		}
	}
	return false
}

// wait blocks while a failover is under way (at most until ctx ends).
func (g *failoverGuard) wait(ctx context.Context) error {
	if g.ready != nil {
		select {
		case <-g.ready:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	g.mu.Lock()
	held := g.held
	g.mu.Unlock()
	if held == nil {
		return nil
	}
	select {
	case <-held:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (g *failoverGuard) DialHook(next redis.DialHook) redis.DialHook { return next }

func (g *failoverGuard) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if err := g.wait(ctx); err != nil {
			cmd.SetErr(err)
			return err
		}
		return next(ctx, cmd)
	}
}

func (g *failoverGuard) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if err := g.wait(ctx); err != nil {
			for _, c := range cmds {
				c.SetErr(err)
			}
			return err
		}
		return next(ctx, cmds)
	}
}

// sentinelClient is a Sentinel client with its failover guard; Close stops
// the guard's listeners too.
type sentinelClient struct {
	*redis.Client
	guard *failoverGuard
}

func (c *sentinelClient) Close() error {
	c.guard.stop()
	return c.Client.Close()
}
