package supervisor

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// stepCalls times, one by one, the Redis calls of a step of the tick (and
// of the writes after a data loss): while the monitor waits in a step it
// makes no other call, the pulse included, so a stall that holds one of
// the step's calls is seen by that call or not at all
// (TestTickHeldWhileWorkersCannotBeatKillsNothing). A call answered after
// longer than slow is a window the monitor could not watch
// (availability.unseen); a step that lasts long because it makes many
// calls, each answered at once (a big adoption, the leader's statistics, a
// slow link's round trips), is not: counting the whole step would postpone
// the judgement of every heartbeat by a TTL at every such tick, and with
// the ticks closer than a TTL (the defaults: 5 s against 30 s) no hung
// worker would ever be killed (TestSlowTickStepStillJudgesHangs). A call
// that failed is not counted: the step fails, and the outage is judged as
// one.
//
// The calls are the ones made with a context from with, through the
// store's client, which carries callTiming (hooked once by New).
type stepCalls struct {
	now  func() time.Time
	slow time.Duration
	mu   sync.Mutex
	seen []window // calls longer than slow, not yet taken
}

type window struct{ start, end time.Time }

type stepCallsKey struct{}

func (c *stepCalls) with(ctx context.Context) context.Context {
	return context.WithValue(ctx, stepCallsKey{}, c)
}

func (c *stepCalls) add(start time.Time, err error) {
	if err != nil && !errors.Is(err, redis.Nil) {
		return
	}
	end := c.now()
	if end.Sub(start) <= c.slow {
		return
	}
	c.mu.Lock()
	c.seen = append(c.seen, window{start, end})
	c.mu.Unlock()
}

// take returns the slow calls since the last take.
func (c *stepCalls) take() []window {
	c.mu.Lock()
	defer c.mu.Unlock()
	w := c.seen
	c.seen = nil
	return w
}

// callTiming is the client hook that times the calls made with a
// stepCalls context. A call is timed by the outermost such hook only (a
// client shared by several supervisors carries one hook of each).
type callTiming struct{}

func timedBy(ctx context.Context) (*stepCalls, context.Context) {
	c, _ := ctx.Value(stepCallsKey{}).(*stepCalls)
	if c == nil {
		return nil, ctx
	}
	return c, context.WithValue(ctx, stepCallsKey{}, (*stepCalls)(nil))
}

func (callTiming) DialHook(next redis.DialHook) redis.DialHook { return next }

// perCallKey marks a context whose every call gets its own deadline (see
// boundCalls).
type perCallKey struct{}

// boundCalls gives every call made with the returned context a deadline of
// its own, d from its start, within ctx's: a tick's budget covers many
// calls, but a Stop that cancels the tick (its base) cannot end a call
// waiting on a Redis that does not answer (go-redis ends a read at its
// deadline only, not at a cancellation): without a deadline per call, a
// Stop during a tick on a paused Redis would wait for the rest of the
// tick's budget, five op_timeouts, before it could stop a worker
// (TestStopDuringATickOnAPausedRedis).
func boundCalls(ctx context.Context, d time.Duration) context.Context {
	return context.WithValue(ctx, perCallKey{}, d)
}

// budgetCtx is parent bounded by n op_timeouts in all, each of its calls
// by one op_timeout of its own (boundCalls): a tick, a recovery, a probe.
func (s *Supervisor) budgetCtx(parent context.Context, n int) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(parent, time.Duration(n)*s.cfg.OpTimeout)
	return boundCalls(ctx, s.cfg.OpTimeout), cancel
}

// perCall applies the deadline boundCalls asked for, if any.
func perCall(ctx context.Context) (context.Context, context.CancelFunc) {
	if d, ok := ctx.Value(perCallKey{}).(time.Duration); ok && d > 0 {
		return context.WithTimeout(ctx, d)
	}
	return ctx, func() {}
}

func (callTiming) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		ctx, cancel := perCall(ctx)
		defer cancel()
		c, inner := timedBy(ctx)
		if c == nil {
			return next(ctx, cmd)
		}
		start := c.now()
		err := next(inner, cmd)
		c.add(start, err)
		return err
	}
}

func (callTiming) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		ctx, cancel := perCall(ctx)
		defer cancel()
		c, inner := timedBy(ctx)
		if c == nil {
			return next(ctx, cmds)
		}
		start := c.now()
		err := next(inner, cmds)
		c.add(start, err)
		return err
	}
}
