package supervisor_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/internal/testredis"
	"github.com/vigil-dev/vigil/policy"
	"github.com/vigil-dev/vigil/supervisor"
)

// waitTimeout bounds every wait on the event stream: generous, for two
// cores under -race.
const waitTimeout = 15 * time.Second

// Heartbeat timing of most tests: short, so that a test takes a second.
var fastBeat = supervisor.Heartbeat{Interval: 100 * time.Millisecond, TTL: time.Second}

// harness is one supervisor on one test Redis.
type harness struct {
	tb    testing.TB
	rdb   redis.UniversalClient
	store *health.Store
	sup   *supervisor.Supervisor
	logs  *logSink
	cfg   supervisor.Config
}

// newHarness makes a supervisor on a fresh test Redis (testredis.New). cfg
// needs only its pools and what the test cares about: host, Redis and
// prefix, heartbeat timing and logger are filled in. It is not started.
func newHarness(tb testing.TB, cfg supervisor.Config) *harness {
	tb.Helper()
	env := testredis.New(tb)
	return newHarnessOn(tb, env.Client, env.URL, env.Prefix, cfg)
}

// newHarnessOn is newHarness on a Redis of the test's choosing.
func newHarnessOn(tb testing.TB, rdb redis.UniversalClient, url, prefix string, cfg supervisor.Config) *harness {
	tb.Helper()
	h := &harness{tb: tb, rdb: rdb, store: health.NewStore(rdb, prefix, 0), logs: newLogSink()}
	if cfg.Host == "" {
		cfg.Host = "h1"
	}
	cfg.RedisURL, cfg.Prefix = url, prefix
	if cfg.Heartbeat == (supervisor.Heartbeat{}) {
		cfg.Heartbeat = fastBeat
	}
	cfg.Logger = slog.New(slog.NewTextHandler(h.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	sup, err := supervisor.New(cfg, h.store)
	if err != nil {
		tb.Fatalf("supervisor.New: %v", err)
	}
	h.sup, h.cfg = sup, sup.Config()
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := sup.Stop(ctx); err != nil {
			tb.Errorf("cleanup: Stop: %v", err)
		}
		if n := sup.IllegalTransitions(); n != 0 {
			tb.Errorf("%d worker moves the state table does not allow (see the log)", n)
		}
		if tb.Failed() {
			tb.Logf("supervisor log:\n%s", h.logs.String())
		}
	})
	return h
}

// start starts the supervisor.
func (h *harness) start() {
	h.tb.Helper()
	if err := h.sup.Start(context.Background()); err != nil {
		h.tb.Fatalf("Start: %v", err)
	}
}

// get reads id from the store.
func (h *harness) get(id health.ComponentID) health.Component {
	h.tb.Helper()
	c, err := h.store.Get(context.Background(), id)
	if err != nil {
		h.tb.Fatalf("get %s: %v", id, err)
	}
	return c
}

// sync returns once the monitor has handled everything sent to it before:
// an action is a command the monitor runs in order.
func (h *harness) sync() []health.Component {
	h.tb.Helper()
	cs, err := h.sup.Components(context.Background())
	if err != nil {
		h.tb.Fatalf("Components: %v", err)
	}
	return cs
}

func (h *harness) waitFor(id health.ComponentID, ok func(health.Component) bool) health.Component {
	h.tb.Helper()
	return waitFor(h.tb, h.store, id, ok)
}

// waitHealthy waits until every id is healthy and returns their records.
func (h *harness) waitHealthy(ids ...health.ComponentID) []health.Component {
	h.tb.Helper()
	out := make([]health.Component, len(ids))
	for i, id := range ids {
		out[i] = h.waitFor(id, isStatus(health.StatusHealthy))
	}
	return out
}

func isStatus(s health.Status) func(health.Component) bool {
	return func(c health.Component) bool { return c.Status == s }
}

func ids(queue string, n int) []health.ComponentID {
	out := make([]health.ComponentID, n)
	for i := range out {
		out[i] = health.ComponentID{Queue: queue, Slot: i}
	}
	return out
}

// longBackoff keeps a crashed component crashed for the whole test.
var longBackoff = policy.Config{BackoffBase: time.Hour, BackoffMax: time.Hour}

// shortBackoff restarts at once.
var shortBackoff = policy.Config{BackoffBase: 10 * time.Millisecond, BackoffMax: 10 * time.Millisecond}

// --- the event stream ---

// eventReader reads the <prefix>events stream from where it stood when the
// reader was made.
type eventReader struct {
	tb   testing.TB
	rdb  redis.UniversalClient
	key  string
	last string
}

func newEventReader(tb testing.TB, store *health.Store) *eventReader {
	tb.Helper()
	r := &eventReader{tb: tb, rdb: store.Client(), key: store.Keys().Events(), last: "0-0"}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	msgs, err := r.rdb.XRevRangeN(ctx, r.key, "+", "-", 1).Result()
	if err != nil {
		tb.Fatalf("read the end of %s: %v", r.key, err)
	}
	if len(msgs) > 0 {
		r.last = msgs[0].ID
	}
	return r
}

// next blocks until entries newer than the last one read arrive, or until
// deadline; it returns them (none at the deadline).
func (r *eventReader) next(deadline time.Time) []health.Event {
	r.tb.Helper()
	for failures := 0; ; {
		left := time.Until(deadline)
		if left <= 0 {
			return nil
		}
		block := max(left.Truncate(time.Millisecond), time.Millisecond)
		ctx, cancel := context.WithTimeout(context.Background(), left+5*time.Second)
		res, err := r.rdb.XRead(ctx, &redis.XReadArgs{Streams: []string{r.key, r.last}, Block: block, Count: 200}).Result()
		cancel()
		switch {
		case errors.Is(err, redis.Nil):
			return nil // BLOCK ran out
		case err != nil:
			// go-redis retries a broken connection itself; a few errors in
			// a row mean Redis is away, which no test waits through here.
			if failures++; failures >= 5 {
				r.tb.Fatalf("XREAD %s: %v", r.key, err)
			}
			continue
		}
		var out []health.Event
		for _, s := range res {
			for _, m := range s.Messages {
				r.last = m.ID
				var ev health.Event
				if data, ok := m.Values["data"].(string); ok && json.Unmarshal([]byte(data), &ev) == nil {
					out = append(out, ev)
				}
			}
		}
		if len(out) > 0 {
			return out
		}
	}
}

// waitFor returns the stored record of id once ok holds. It reads the
// record once, then again after each new entry of the event stream (every
// state change is announced there), blocking on XREAD in between.
func waitFor(tb testing.TB, store *health.Store, id health.ComponentID, ok func(health.Component) bool) health.Component {
	tb.Helper()
	return newEventReader(tb, store).waitFor(store, id, ok)
}

// waitForWithin is waitFor with its own timeout.
func waitForWithin(tb testing.TB, store *health.Store, id health.ComponentID, ok func(health.Component) bool, timeout time.Duration) health.Component {
	tb.Helper()
	return newEventReader(tb, store).waitForWithin(store, id, ok, timeout)
}

func (r *eventReader) waitFor(store *health.Store, id health.ComponentID, ok func(health.Component) bool) health.Component {
	r.tb.Helper()
	return r.waitForWithin(store, id, ok, waitTimeout)
}

// recheck bounds how long waitFor waits on the event stream before it reads
// the record again.
const recheck = 250 * time.Millisecond

func (r *eventReader) waitForWithin(store *health.Store, id health.ComponentID, ok func(health.Component) bool, waitTimeout time.Duration) health.Component {
	r.tb.Helper()
	deadline := time.Now().Add(waitTimeout)
	var last health.Component
	for {
		c, err := store.Get(context.Background(), id)
		switch {
		case err == nil:
			last = c
			if ok(c) {
				return c
			}
		case !errors.Is(err, health.ErrNotFound):
			r.tb.Fatalf("read %s: %v", id, err)
		}
		// Woken by the next event, or a poll later: some changes have no
		// event (a plain heartbeat sets last_heartbeat and nothing else).
		wake := time.Now().Add(recheck)
		if deadline.Before(wake) {
			wake = deadline
		}
		if r.next(wake) == nil && !time.Now().Before(deadline) {
			r.tb.Fatalf("timed out after %s waiting on %s; last %s", waitTimeout, id, describe(last))
			return last
		}
	}
}

// waitEvent returns the first worker event of id, from the reader's
// position on, that ok accepts. It sees states that do not last (crashed
// before a quick restart), which the store may already have left.
func (r *eventReader) waitEvent(id health.ComponentID, ok func(health.WorkerView) bool) health.WorkerView {
	r.tb.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		evs := r.next(deadline)
		if evs == nil {
			r.tb.Fatalf("timed out after %s waiting for an event of %s", waitTimeout, id)
		}
		for _, ev := range evs {
			if w := ev.Worker; w != nil && w.Component == id.String() && ok(*w) {
				return *w
			}
		}
	}
}

// expectNone reads the stream for d and fails on any worker event that bad
// accepts: a watch for something that must not happen.
func (r *eventReader) expectNone(d time.Duration, bad func(health.WorkerView) bool) {
	r.tb.Helper()
	deadline := time.Now().Add(d)
	for {
		evs := r.next(deadline)
		if evs == nil {
			return
		}
		for _, ev := range evs {
			if w := ev.Worker; w != nil && bad(*w) {
				r.tb.Errorf("unexpected event %s: %+v", ev.Topic, *w)
			}
		}
	}
}

// workerEvents reads the whole stream and returns id's worker events.
func workerEvents(tb testing.TB, store *health.Store, id health.ComponentID) []health.WorkerView {
	tb.Helper()
	msgs, err := store.Client().XRange(context.Background(), store.Keys().Events(), "-", "+").Result()
	if err != nil {
		tb.Fatalf("XRANGE events: %v", err)
	}
	var out []health.WorkerView
	for _, m := range msgs {
		var ev health.Event
		if data, ok := m.Values["data"].(string); ok && json.Unmarshal([]byte(data), &ev) == nil {
			if ev.Worker != nil && ev.Worker.Component == id.String() {
				out = append(out, *ev.Worker)
			}
		}
	}
	return out
}

// spawnedPIDs lists, in order, the processes started for id: each spawn
// announces the new pid with status starting.
func spawnedPIDs(tb testing.TB, store *health.Store, id health.ComponentID) []int {
	tb.Helper()
	var pids []int
	seen := map[int]bool{}
	for _, w := range workerEvents(tb, store, id) {
		if w.Status == string(health.StatusStarting) && w.PID != 0 && !seen[w.PID] {
			seen[w.PID] = true
			pids = append(pids, w.PID)
		}
	}
	return pids
}

func describe(c health.Component) string {
	b, _ := json.Marshal(c.View())
	return string(b)
}

// --- the supervisor's log ---

// logSink collects log lines (slog's text handler writes one line per
// call) and lets a test wait for one.
type logSink struct {
	mu      sync.Mutex
	lines   []string
	changed chan struct{} // closed and replaced on every line
}

func newLogSink() *logSink { return &logSink{changed: make(chan struct{})} }

func (l *logSink) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, string(p))
	close(l.changed)
	l.changed = make(chan struct{})
	return len(p), nil
}

func (l *logSink) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "")
}

// line returns line i.
func (l *logSink) line(i int) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lines[i]
}

// mark is the number of lines so far, for wait.
func (l *logSink) mark() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.lines)
}

// since returns the lines from index from on.
func (l *logSink) since(from int) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines[min(from, len(l.lines)):], "")
}

// find returns the index of the first line from index from on that
// contains every one of parts, if there is one now.
func (l *logSink) find(from int, parts ...string) (int, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := from; i < len(l.lines); i++ {
		if containsAll(l.lines[i], parts) {
			return i, true
		}
	}
	return -1, false
}

// wait returns the index of the first line from index from on that
// contains every one of parts, waiting for it up to timeout.
func (l *logSink) wait(tb testing.TB, from int, timeout time.Duration, parts ...string) int {
	tb.Helper()
	return l.waitLine(tb, from, timeout, fmt.Sprintf("with %q", parts), func(line string) bool { return containsAll(line, parts) })
}

// waitAny returns the index of the first line from index from on that
// contains one of parts, waiting for it up to timeout.
func (l *logSink) waitAny(tb testing.TB, from int, timeout time.Duration, parts ...string) int {
	tb.Helper()
	return l.waitLine(tb, from, timeout, fmt.Sprintf("with any of %q", parts), func(line string) bool {
		return slices.ContainsFunc(parts, func(p string) bool { return strings.Contains(line, p) })
	})
}

// waitLine returns the index of the first line from index from on that
// match accepts, waiting for it up to timeout (what describes the line).
func (l *logSink) waitLine(tb testing.TB, from int, timeout time.Duration, what string, match func(string) bool) int {
	tb.Helper()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		l.mu.Lock()
		for i := from; i < len(l.lines); i++ {
			if match(l.lines[i]) {
				l.mu.Unlock()
				return i
			}
		}
		from = len(l.lines)
		changed := l.changed
		l.mu.Unlock()
		select {
		case <-changed:
		case <-timer.C:
			tb.Fatalf("no log line %s within %s", what, timeout)
			return -1
		}
	}
}

func containsAll(s string, parts []string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}

// receive waits for one value from ch up to timeout.
func receive[T any](tb testing.TB, ch <-chan T, timeout time.Duration, what string) T {
	tb.Helper()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case v := <-ch:
		return v
	case <-timer.C:
		tb.Fatalf("timed out after %s waiting for %s", timeout, what)
		var zero T
		return zero
	}
}
