package chaos_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/queue"
)

// collector tails Vigil's event stream (<prefix>events) for the whole test,
// through Redis outages, so that nothing trimmed from the stream is missed.
type collector struct {
	mu      sync.Mutex
	events  []seen
	changed chan struct{}
	errs    int // failed reads (Redis away)
	stop    context.CancelFunc
	wg      sync.WaitGroup
}

// seen is one event and when the test read it.
type seen struct {
	id  string
	at  time.Time
	ev  health.Event
	job *queue.JobEvent
}

func collect(t *testing.T, r *redisProc, prefix string) *collector {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	c := &collector{changed: make(chan struct{}), stop: cancel}
	key := health.NewKeys(prefix).Events()
	c.wg.Go(func() { c.run(ctx, r.c, key) })
	t.Cleanup(func() {
		cancel()
		c.wg.Wait()
	})
	return c
}

func (c *collector) run(ctx context.Context, rdb *redis.Client, key string) {
	last := "0-0"
	for ctx.Err() == nil {
		res, err := rdb.XRead(ctx, &redis.XReadArgs{Streams: []string{key, last}, Block: 500 * time.Millisecond, Count: 1000}).Result()
		switch {
		case errors.Is(err, redis.Nil):
			continue
		case err != nil:
			c.mu.Lock()
			c.errs++
			c.mu.Unlock()
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond): // Redis is away: try again
			}
			continue
		}
		now := time.Now()
		var batch []seen
		for _, s := range res {
			for _, m := range s.Messages {
				last = m.ID
				// A job's entry is also queue:jobs's: two events.
				for _, ee := range health.EntryEvents(m.Values) {
					var ev health.Event
					if json.Unmarshal(ee.Data, &ev) != nil {
						continue
					}
					e := seen{id: m.ID, at: now, ev: ev}
					if ev.Type == health.EventJob && ev.Topic == queue.TopicJobs {
						if je, err := queue.DecodeJobEvent(ev); err == nil {
							e.job = &je
						}
					}
					batch = append(batch, e)
				}
			}
		}
		c.mu.Lock()
		c.events = append(c.events, batch...)
		close(c.changed)
		c.changed = make(chan struct{})
		c.mu.Unlock()
	}
}

// all returns the events read so far.
func (c *collector) all() []seen {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]seen(nil), c.events...)
}

// workers returns the worker events read so far, optionally only those ok
// accepts.
func (c *collector) workers(ok func(health.WorkerView) bool) []health.WorkerView {
	var out []health.WorkerView
	for _, e := range c.all() {
		if w := e.ev.Worker; w != nil && (ok == nil || ok(*w)) {
			out = append(out, *w)
		}
	}
	return out
}

// jobs returns the job events (queue:jobs copies) read so far in state st.
func (c *collector) jobs(st queue.JobState) []queue.JobEvent {
	var out []queue.JobEvent
	for _, e := range c.all() {
		if e.job != nil && e.job.State == st {
			out = append(out, *e.job)
		}
	}
	return out
}

// wait re-evaluates cond after every batch of events and at least every
// poll (for state that is not announced, such as the ledger), until it
// holds or timeout passes; it reports whether it held.
func (c *collector) wait(timeout, poll time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for {
		c.mu.Lock()
		ch := c.changed
		c.mu.Unlock()
		if cond() {
			return true
		}
		left := time.Until(deadline)
		if left <= 0 {
			return false
		}
		select {
		case <-ch:
		case <-time.After(min(poll, left)): // state outside the stream: look again
		}
	}
}

func statusIs(s health.Status) func(health.WorkerView) bool {
	return func(w health.WorkerView) bool { return w.Status == string(s) }
}
