package health_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/internal/clock"
	"github.com/vigil-dev/vigil/internal/testlog"
	"github.com/vigil-dev/vigil/internal/testredis"
)

const (
	beatPID = 4100
	beatTTL = 30 * time.Second
)

// newHeartbeater returns a heartbeater for tag0 as process beatPID, on s,
// with a fake clock at t0.
func newHeartbeater(tb testing.TB, s *health.Store) (*health.Heartbeater, *clock.Fake) {
	tb.Helper()
	fc := clock.NewFake(t0)
	return &health.Heartbeater{
		Store:     s,
		ID:        tag0,
		PID:       beatPID,
		Host:      "box-1",
		StartedAt: t0.Add(-time.Second),
		Interval:  5 * time.Second,
		TTL:       beatTTL,
		Logger:    slog.New(slog.DiscardHandler),
		Clock:     fc,
	}, fc
}

// assertHeartbeatKey checks that the heartbeat key holds now and expires in
// about one TTL.
func assertHeartbeatKey(tb testing.TB, s *health.Store, now time.Time) {
	tb.Helper()
	ctx := testCtx(tb)
	key := s.Keys().Heartbeat(tag0)
	v, err := s.Client().Get(ctx, key).Result()
	if err != nil {
		tb.Fatalf("GET %s: %v", key, err)
	}
	if v != health.FormatHeartbeat(now) {
		tb.Errorf("%s = %q, want %q", key, v, health.FormatHeartbeat(now))
	}
	ttl, err := s.Client().PTTL(ctx, key).Result()
	if err != nil {
		tb.Fatalf("PTTL %s: %v", key, err)
	}
	if ttl <= beatTTL-5*time.Second || ttl > beatTTL {
		tb.Errorf("PTTL %s = %v, want about %v", key, ttl, beatTTL)
	}
}

func TestBeatRecreatesMissingRecord(t *testing.T) {
	s, _ := newStore(t)
	h, fc := newHeartbeater(t, s)
	ctx := testCtx(t)

	res, err := h.Beat(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res != health.BeatRecreated {
		t.Errorf("Beat = %v, want BeatRecreated", res)
	}
	now := fmt.Sprint(fc.Now().UnixMilli())
	rec := hash(t, s, s.Keys().Component(tag0))
	want := map[string]string{
		health.FieldStatus:        "healthy",
		health.FieldPID:           fmt.Sprint(beatPID),
		health.FieldQueue:         "tag",
		health.FieldSlot:          "0",
		health.FieldHost:          "box-1",
		health.FieldHeld:          "0",
		health.FieldStartedAt:     fmt.Sprint(h.StartedAt.UnixMilli()),
		health.FieldHealthySince:  now,
		health.FieldLastHeartbeat: now,
	}
	// A record re-created from nothing starts its revision at Redis's
	// clock: above the one Redis lost (TestRevAboveTheLostRecord).
	rev := rec[health.FieldRev]
	if n, err := strconv.ParseInt(rev, 10, 64); err != nil || n < time.Now().Add(-time.Minute).UnixMicro() {
		t.Errorf("re-created record: rev = %q, want Redis's clock in µs", rev)
	}
	for f, v := range want {
		if rec[f] != v {
			t.Errorf("re-created record: %s = %q, want %q (record %v)", f, rec[f], v, rec)
		}
	}
	assertHeartbeatKey(t, s, fc.Now())
	if ok, err := s.Client().SIsMember(ctx, s.Keys().Components(), tag0.String()).Result(); err != nil || !ok {
		t.Errorf("re-created component not in the index (%v)", err)
	}
	msgs := events(t, s)
	if len(msgs) != 1 {
		t.Fatalf("%d events, want 1", len(msgs))
	}
	e := decodeEvent(t, msgs[0])
	if e.Topic != tag0.Topic() || e.Worker == nil || e.Worker.Status != "healthy" || e.Worker.PID != beatPID || fmt.Sprint(e.Worker.Rev) != rev {
		t.Errorf("event = %+v", e)
	}
}

func TestBeatStartingBecomesHealthy(t *testing.T) {
	s, _ := newStore(t)
	seed(t, s, record(tag0, health.StatusStarting, beatPID))
	h, fc := newHeartbeater(t, s)
	fc.Advance(3 * time.Second)
	before := hash(t, s, s.Keys().Component(tag0))

	res, err := h.Beat(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if res != health.BeatHealthy {
		t.Errorf("Beat = %v, want BeatHealthy", res)
	}
	after := hash(t, s, s.Keys().Component(tag0))
	now := fmt.Sprint(fc.Now().UnixMilli())
	if after[health.FieldStatus] != "healthy" || after[health.FieldHealthySince] != now || after[health.FieldLastHeartbeat] != now {
		t.Errorf("record after the first beat = %v", after)
	}
	// What the supervisor wrote stays.
	for _, f := range []string{health.FieldHost, health.FieldInstance, health.FieldPID, health.FieldStartedAt, health.FieldQueue, health.FieldSlot} {
		if after[f] != before[f] {
			t.Errorf("%s changed from %q to %q", f, before[f], after[f])
		}
	}
	assertHeartbeatKey(t, s, fc.Now())
	msgs := events(t, s)
	if len(msgs) != 1 {
		t.Fatalf("%d events, want 1", len(msgs))
	}
	if e := decodeEvent(t, msgs[0]); e.Worker == nil || e.Worker.Status != "healthy" || e.Worker.HealthySince != fc.Now().UnixMilli() {
		t.Errorf("event = %+v", e)
	}

	// The next beat is a plain one.
	fc.Advance(5 * time.Second)
	if res, err := h.Beat(testCtx(t)); err != nil || res != health.BeatWritten {
		t.Errorf("second Beat = %v, %v; want BeatWritten", res, err)
	}
	if n := len(events(t, s)); n != 1 {
		t.Errorf("%d events after a plain beat, want still 1", n)
	}
}

// In healthy and stopping, a beat refreshes the heartbeat key and
// last_heartbeat and nothing else.
func TestBeatRefreshesOnly(t *testing.T) {
	for _, st := range []health.Status{health.StatusHealthy, health.StatusStopping} {
		t.Run(string(st), func(t *testing.T) {
			s, _ := newStore(t)
			c := record(tag0, st, beatPID)
			c.HealthySince = t0
			seed(t, s, c)
			h, fc := newHeartbeater(t, s)
			fc.Advance(time.Minute)
			before := dump(t, s)
			beforeRec := hash(t, s, s.Keys().Component(tag0))

			res, err := h.Beat(testCtx(t))
			if err != nil {
				t.Fatal(err)
			}
			if res != health.BeatWritten {
				t.Errorf("Beat = %v, want BeatWritten", res)
			}
			assertHeartbeatKey(t, s, fc.Now())
			rec := hash(t, s, s.Keys().Component(tag0))
			if rec[health.FieldLastHeartbeat] != fmt.Sprint(fc.Now().UnixMilli()) {
				t.Errorf("last_heartbeat = %q, want %d", rec[health.FieldLastHeartbeat], fc.Now().UnixMilli())
			}
			if rec[health.FieldStatus] != string(st) {
				t.Errorf("status = %q, want %q", rec[health.FieldStatus], st)
			}
			delete(rec, health.FieldLastHeartbeat)
			if !mapsEqual(rec, beforeRec) {
				t.Errorf("record changed beyond last_heartbeat:\n%v\n→ %v", beforeRec, rec)
			}
			// No other key changed: no event, no index entry, no history.
			after := dump(t, s)
			for _, k := range []string{s.Keys().Heartbeat(tag0), s.Keys().Component(tag0)} {
				delete(before, k)
				delete(after, k)
			}
			if d := diffDumps(before, after); len(d) > 0 {
				t.Errorf("a plain beat wrote:\n%v", d)
			}
		})
	}
}

// A stale writer writes nothing at all: no heartbeat key, no field, no event.
func TestBeatStale(t *testing.T) {
	tests := []struct {
		name   string
		status health.Status
		pid    int // 0: the record has no pid
		held   bool
	}{
		{"another pid starting", health.StatusStarting, beatPID + 1, false},
		{"another pid healthy", health.StatusHealthy, beatPID + 1, false},
		{"another pid stopping", health.StatusStopping, beatPID + 1, false},
		{"own pid crashed", health.StatusCrashed, beatPID, false},
		{"own pid stopped", health.StatusStopped, beatPID, false},
		{"own pid stopped held", health.StatusStopped, beatPID, true},
		{"own pid failed", health.StatusFailed, beatPID, false},
		{"no pid stopped", health.StatusStopped, 0, false},
		{"no pid failed", health.StatusFailed, 0, false},
		{"no pid crashed", health.StatusCrashed, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, _ := newStore(t)
			c := record(tag0, tt.status, tt.pid)
			c.Held = tt.held
			seed(t, s, c)
			h, _ := newHeartbeater(t, s)
			before := dump(t, s)

			res, err := h.Beat(testCtx(t))
			if !errors.Is(err, health.ErrStale) {
				t.Fatalf("Beat = %v, %v; want ErrStale", res, err)
			}
			if !strings.Contains(err.Error(), tag0.String()) {
				t.Errorf("error %q does not name the component", err)
			}
			if d := diffDumps(before, dump(t, s)); len(d) > 0 {
				t.Errorf("a stale beat wrote:\n%v", d)
			}
		})
	}
}

// The supervisor writes starting without a pid just before it forks and
// the pid right after (issue 12, defect 8). A process that beats in
// between is not adopted: it may be a stale one (a fenced worker, an
// orphan of a killed supervisor) rather than the new child. Nothing is
// written; the beat is answered "pending" and tried again.
func TestBeatDoesNotAdoptStartingWithoutPID(t *testing.T) {
	s, _ := newStore(t)
	seed(t, s, record(tag0, health.StatusStarting, 0))
	h, _ := newHeartbeater(t, s)
	before := dump(t, s)
	res, err := h.Beat(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if d := diffDumps(before, dump(t, s)); len(d) > 0 {
		t.Errorf("a beat on a record without a pid wrote:\n%v", d)
	}
	if res != health.BeatPending {
		t.Errorf("Beat = %v, want BeatPending", res)
	}
}

func TestRunStale(t *testing.T) {
	s, _ := newStore(t)
	seed(t, s, record(tag0, health.StatusHealthy, beatPID+1))
	h, fc := newHeartbeater(t, s)
	done := make(chan error, 1)
	go func() { done <- h.Run(context.Background()) }()
	// The first stale answer is forgiven once (health.StaleAfter = 2): Run
	// waits an interval and asks again.
	select {
	case d := <-fc.Scheduled():
		fc.Advance(d)
	case err := <-done:
		t.Fatalf("Run gave up after one stale answer: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not schedule its second beat")
	}
	err := waitErr(t, done)
	if !errors.Is(err, health.ErrStale) {
		t.Fatalf("Run = %v, want ErrStale", err)
	}
	if n := s.Client().Exists(testCtx(t), s.Keys().Heartbeat(tag0)).Val(); n != 0 {
		t.Error("a stale Run wrote the heartbeat key")
	}
}

func TestRunStopsWithContext(t *testing.T) {
	s, _ := newStore(t)
	seed(t, s, record(tag0, health.StatusStarting, beatPID))
	h, fc := newHeartbeater(t, s)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx) }()
	if d := nextTimer(t, fc); d != h.Interval {
		t.Errorf("Run waits %v, want the interval %v", d, h.Interval)
	}
	if h.Beats() != 1 {
		t.Errorf("Beats = %d after the first wait, want 1 (Run beats at once)", h.Beats())
	}
	cancel()
	if err := waitErr(t, done); err != nil {
		t.Errorf("Run = %v after cancel, want nil", err)
	}
	if p := fc.Pending(); len(p) != 0 {
		t.Errorf("Run left timers behind: %v", p)
	}
}

// While Redis cannot be reached Run keeps going; the third failure in a row
// logs HEARTBEAT_DEGRADED, once, and the first success after it
// HEARTBEAT_RECOVERED.
func TestRunDegradedAndRecovered(t *testing.T) {
	base, env := newStore(t)
	seed(t, base, record(tag0, health.StatusStarting, beatPID))

	s, link := faultyStore(t, env)

	h, fc := newHeartbeater(t, s)
	logs := &testlog.Buffer{}
	h.Logger = slog.New(slog.NewTextHandler(logs, nil))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := waitErr(t, done); err != nil {
			t.Errorf("Run = %v after cancel, want nil", err)
		}
	})

	// step advances to the next beat and waits until Run has made it and
	// waits again.
	step := func() {
		t.Helper()
		fc.Advance(h.Interval)
		nextTimer(t, fc)
	}
	nextTimer(t, fc) // the first beat, at once
	if h.Beats() != 1 || h.Failures() != 0 {
		t.Fatalf("after the first beat: beats %d, failures %d", h.Beats(), h.Failures())
	}

	link.setDown(true)
	for i := int64(1); i <= health.DegradedAfter+2; i++ {
		step()
		if h.Failures() != i {
			t.Fatalf("after %d failed beats Failures() = %d", i, h.Failures())
		}
		want := 0
		if i >= health.DegradedAfter {
			want = 1
		}
		if n := strings.Count(logs.String(), "msg=HEARTBEAT_DEGRADED"); n != want {
			t.Fatalf("after %d failed beats HEARTBEAT_DEGRADED logged %d times, want %d\n%s", i, n, want, logs)
		}
	}
	if n := strings.Count(logs.String(), "msg=HEARTBEAT_RECOVERED"); n != 0 {
		t.Fatalf("HEARTBEAT_RECOVERED logged while down:\n%s", logs)
	}
	if !strings.Contains(logs.String(), "component="+tag0.String()) {
		t.Errorf("log lines do not name the component:\n%s", logs)
	}

	link.setDown(false)
	step()
	if n := strings.Count(logs.String(), "msg=HEARTBEAT_RECOVERED"); n != 1 {
		t.Fatalf("HEARTBEAT_RECOVERED logged %d times, want 1\n%s", n, logs)
	}
	if h.Failures() != 0 || h.Beats() != 2 {
		t.Errorf("after recovery: failures %d, beats %d; want 0, 2", h.Failures(), h.Beats())
	}
	// What the worker reports to /metrics: failures in all, and one
	// degraded episode.
	if h.Failed() != health.DegradedAfter+2 || h.Degraded() != 1 {
		t.Errorf("after recovery: Failed %d, Degraded %d; want %d, 1", h.Failed(), h.Degraded(), health.DegradedAfter+2)
	}
	assertHeartbeatKey(t, base, fc.Now())
	step()
	if n := strings.Count(logs.String(), "msg=HEARTBEAT_RECOVERED"); n != 1 {
		t.Errorf("HEARTBEAT_RECOVERED logged again after a second good beat:\n%s", logs)
	}
	if n := strings.Count(logs.String(), "msg=HEARTBEAT_DEGRADED"); n != 1 {
		t.Errorf("HEARTBEAT_DEGRADED logged %d times in all, want 1", n)
	}
}

// A single failure that heals does not count as degraded.
func TestRunShortOutageIsNotDegraded(t *testing.T) {
	base, env := newStore(t)
	seed(t, base, record(tag0, health.StatusStarting, beatPID))
	s, link := faultyStore(t, env)
	h, fc := newHeartbeater(t, s)
	logs := &testlog.Buffer{}
	h.Logger = slog.New(slog.NewTextHandler(logs, nil))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx) }()
	defer func() {
		cancel()
		if err := waitErr(t, done); err != nil {
			t.Errorf("Run = %v", err)
		}
	}()
	nextTimer(t, fc)
	for range health.DegradedAfter {
		link.setDown(true)
		fc.Advance(h.Interval)
		nextTimer(t, fc)
		link.setDown(false)
		fc.Advance(h.Interval)
		nextTimer(t, fc)
	}
	if n := strings.Count(logs.String(), "HEARTBEAT_"); n != 0 {
		t.Errorf("isolated failures logged HEARTBEAT_*:\n%s", logs)
	}
	if h.Failures() != 0 || h.Beats() != 1+health.DegradedAfter {
		t.Errorf("failures %d, beats %d", h.Failures(), h.Beats())
	}
}

// faultyStore is a store on env's Redis through a link the test can cut.
// The client does not retry, so that one beat is one attempt.
func faultyStore(tb testing.TB, env *testredis.Env) (*health.Store, *faultyLink) {
	tb.Helper()
	link := &faultyLink{}
	opt, err := redis.ParseURL(env.URL)
	if err != nil {
		tb.Fatal(err)
	}
	opt.MaxRetries, opt.DialerRetries = -1, 1
	opt.Dialer = link.dial
	rdb := redis.NewClient(opt)
	tb.Cleanup(func() { _ = rdb.Close() })
	return health.NewStore(rdb, env.Prefix, 0), link
}

// faultyLink dials real connections that fail, like a cut network, while
// it is down.
type faultyLink struct{ down atomic.Bool }

func (l *faultyLink) setDown(down bool) { l.down.Store(down) }

var errLinkDown = errors.New("test: link down")

func (l *faultyLink) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	if l.down.Load() {
		return nil, errLinkDown
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &faultyConn{Conn: c, link: l}, nil
}

type faultyConn struct {
	net.Conn
	link *faultyLink
}

func (c *faultyConn) Read(p []byte) (int, error) {
	if c.link.down.Load() {
		return 0, errLinkDown
	}
	return c.Conn.Read(p)
}

func (c *faultyConn) Write(p []byte) (int, error) {
	if c.link.down.Load() {
		return 0, errLinkDown
	}
	return c.Conn.Write(p)
}

// nextTimer waits until the fake clock's next timer is scheduled and
// returns its duration.
func nextTimer(tb testing.TB, fc *clock.Fake) time.Duration {
	tb.Helper()
	select {
	case d := <-fc.Scheduled():
		return d
	case <-time.After(10 * time.Second):
		tb.Fatal("no timer scheduled within 10s")
		return 0
	}
}

func waitErr(tb testing.TB, ch <-chan error) error {
	tb.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(10 * time.Second):
		tb.Fatal("no result within 10s")
		return nil
	}
}
