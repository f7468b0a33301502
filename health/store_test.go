package health_test

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/policy"
)

func TestWriteAllowed(t *testing.T) {
	tests := []struct {
		from  health.Status // StatusNone: no record
		held  bool
		to    health.Status
		actor health.Actor
	}{
		{health.StatusNone, false, health.StatusStarting, health.ActorMonitor},
		{health.StatusStopped, false, health.StatusStarting, health.ActorMonitor},
		{health.StatusCrashed, false, health.StatusStarting, health.ActorMonitor},
		{health.StatusFailed, false, health.StatusStarting, health.ActorOperator},
		{health.StatusStopped, true, health.StatusStarting, health.ActorOperator},
		{health.StatusStarting, false, health.StatusHealthy, health.ActorMonitor},
		{health.StatusHealthy, false, health.StatusStopping, health.ActorOperator},
		{health.StatusStopping, false, health.StatusStopped, health.ActorMonitor},
		{health.StatusHealthy, false, health.StatusCrashed, health.ActorMonitor},
		{health.StatusCrashed, false, health.StatusFailed, health.ActorMonitor},
		{health.StatusCrashed, false, health.StatusStopped, health.ActorMonitor},
		{health.StatusStopping, false, health.StatusStarting, health.ActorTakeover},
		{health.StatusFailed, false, health.StatusStopped, health.ActorOperator},
		{health.StatusStopped, true, health.StatusStopped, health.ActorOperator},
	}
	for _, tt := range tests {
		name := fmt.Sprintf("%s/held=%v→%s/%s", statusName(tt.from), tt.held, tt.to, tt.actor)
		t.Run(name, func(t *testing.T) {
			s, _ := newStore(t)
			ctx := testCtx(t)
			if tt.from != health.StatusNone {
				c := record(tag0, tt.from, 100)
				c.Held = tt.held
				seed(t, s, c)
			}
			next := record(tag0, tt.to, 200)
			next.Held = tt.to == health.StatusStopped && tt.actor == health.ActorOperator
			prev, err := s.Write(ctx, next, health.Write{Actor: tt.actor})
			if err != nil {
				t.Fatalf("Write: %v", err)
			}
			if prev != tt.from {
				t.Errorf("prev = %q, want %q", prev, tt.from)
			}
			h := hash(t, s, s.Keys().Component(tag0))
			if h[health.FieldStatus] != string(tt.to) || h[health.FieldPID] != "200" {
				t.Errorf("stored %v, want status %s pid 200", h, tt.to)
			}
			if wantHeld := map[bool]string{false: "0", true: "1"}[next.Held]; h[health.FieldHeld] != wantHeld {
				t.Errorf("held = %q, want %q", h[health.FieldHeld], wantHeld)
			}
		})
	}
}

func TestWriteRefusedLeavesRedisUnchanged(t *testing.T) {
	tests := []struct {
		from  health.Status
		held  bool
		to    health.Status
		actor health.Actor
	}{
		{health.StatusHealthy, false, health.StatusFailed, health.ActorMonitor},   // only crashed → failed
		{health.StatusHealthy, false, health.StatusStarting, health.ActorMonitor}, // a live one is restarted only by takeover
		{health.StatusStopped, true, health.StatusStarting, health.ActorMonitor},  // held: operator only
		{health.StatusFailed, false, health.StatusStarting, health.ActorMonitor},  // failed: operator only
		{health.StatusFailed, false, health.StatusStarting, health.ActorTakeover},
		{health.StatusStopping, false, health.StatusCrashed, health.ActorMonitor},
		{health.StatusHealthy, false, health.StatusStopped, health.ActorOperator}, // reset of a running one
		{health.StatusStarting, false, health.StatusHealthy, health.ActorOperator},
		{health.StatusNone, false, health.StatusHealthy, health.ActorMonitor},
		{health.StatusNone, false, health.StatusStopped, health.ActorOperator},
	}
	for _, tt := range tests {
		name := fmt.Sprintf("%s/held=%v→%s/%s", statusName(tt.from), tt.held, tt.to, tt.actor)
		t.Run(name, func(t *testing.T) {
			s, _ := newStore(t)
			ctx := testCtx(t)
			if tt.from != health.StatusNone {
				c := record(tag0, tt.from, 100)
				c.Held = tt.held
				c.Restarts = policy.State{RestartCount: 2, LifetimeRestarts: 4, Crashes: []time.Time{t0}}
				if _, err := s.Write(ctx, c, health.Write{NoCheck: true, Restarts: true}); err != nil {
					t.Fatal(err)
				}
			}
			if err := s.Client().Set(ctx, s.Keys().Heartbeat(tag0), "1", time.Minute).Err(); err != nil {
				t.Fatal(err)
			}
			before := dump(t, s)

			next := record(tag0, tt.to, 200)
			next.Restarts = policy.State{RestartCount: 9, LifetimeRestarts: 9}
			_, err := s.Write(ctx, next, health.Write{Actor: tt.actor, Restarts: true, ClearHeartbeat: true, Index: true})

			var te *health.TransitionError
			if !errors.As(err, &te) {
				t.Fatalf("Write = %v, want a *TransitionError", err)
			}
			if !errors.Is(err, health.ErrTransition) {
				t.Errorf("errors.Is(%v, ErrTransition) = false", err)
			}
			want := health.TransitionError{Component: tag0, From: tt.from, Held: tt.held, To: tt.to, Actor: tt.actor}
			if *te != want {
				t.Errorf("error = %+v, want %+v (the stored state)", *te, want)
			}
			if d := diffDumps(before, dump(t, s)); len(d) > 0 {
				t.Errorf("a refused write changed Redis:\n%v", d)
			}
		})
	}
}

func TestWriteFields(t *testing.T) {
	s, _ := newStore(t)
	ctx := testCtx(t)
	c := record(tag0, health.StatusStarting, 4242)
	if _, err := s.Write(ctx, c, health.Write{Actor: health.ActorMonitor, Index: true}); err != nil {
		t.Fatal(err)
	}
	h := hash(t, s, s.Keys().Component(tag0))
	// rev is Redis's clock in µs (TestRevAboveTheLostRecord).
	if atoi(t, h[health.FieldRev]) < time.Now().Add(-time.Minute).UnixMicro() {
		t.Errorf("rev = %s, want Redis's clock in µs", h[health.FieldRev])
	}
	delete(h, health.FieldRev)
	want := map[string]string{
		health.FieldStatus:    "starting",
		health.FieldReason:    "",
		health.FieldHeld:      "0",
		health.FieldHost:      "box-1",
		health.FieldInstance:  "i1",
		health.FieldPID:       "4242",
		health.FieldQueue:     "tag",
		health.FieldSlot:      "0",
		health.FieldStartedAt: fmt.Sprint(t0.UnixMilli()),
		health.FieldSignal:    "",
		health.FieldUpdatedAt: fmt.Sprint(t0.Add(time.Second).UnixMilli()),
		health.FieldCreatedAt: fmt.Sprint(t0.Add(time.Second).UnixMilli()), // the first write registers it
	}
	if !mapsEqual(h, want) {
		t.Errorf("record = %v\nwant %v", h, want)
	}

	// It crashes: status and exit fields in one write.
	c.Status, c.ExitCode, c.HasExit, c.Signal, c.Reason = health.StatusCrashed, 137, true, "SIGKILL", "exited"
	c.UpdatedAt = t0.Add(time.Minute)
	if _, err := s.Write(ctx, c, health.Write{Actor: health.ActorMonitor}); err != nil {
		t.Fatal(err)
	}
	got, err := s.Get(ctx, tag0)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != health.StatusCrashed || !got.HasExit || got.ExitCode != 137 || got.Signal != "SIGKILL" ||
		got.Reason != "exited" || got.PID != 4242 || !got.UpdatedAt.Equal(c.UpdatedAt) || !got.StartedAt.Equal(t0) {
		t.Errorf("Get = %+v", got)
	}

	// A new process starts clean: the last exit is kept until the next one
	// only through the record the supervisor writes, and ClearHeartbeat
	// removes the old process's heartbeat.
	if err := s.Client().Set(ctx, s.Keys().Heartbeat(tag0), "1", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	c.Status, c.PID, c.HasExit, c.ExitCode, c.Signal = health.StatusStarting, 4343, false, 0, ""
	if _, err := s.Write(ctx, c, health.Write{Actor: health.ActorMonitor, ClearHeartbeat: true}); err != nil {
		t.Fatal(err)
	}
	h = hash(t, s, s.Keys().Component(tag0))
	if _, ok := h[health.FieldExitCode]; ok {
		t.Errorf("exit_code kept after a write without exit: %v", h)
	}
	if n := s.Client().Exists(ctx, s.Keys().Heartbeat(tag0)).Val(); n != 0 {
		t.Error("ClearHeartbeat left the heartbeat key")
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func TestWriteEvent(t *testing.T) {
	s, _ := newStore(t)
	ctx := testCtx(t)
	c := record(health.ComponentID{Queue: "library", Slot: 3}, health.StatusStarting, 77)
	if _, err := s.Write(ctx, c, health.Write{Actor: health.ActorMonitor}); err != nil {
		t.Fatal(err)
	}
	msgs := events(t, s)
	if len(msgs) != 1 {
		t.Fatalf("%d events in %s, want 1", len(msgs), s.Keys().Events())
	}
	if s.Keys().Events() != s.Keys().Prefix+"events" {
		t.Fatalf("events key %q", s.Keys().Events())
	}
	e := decodeEvent(t, msgs[0])
	if e.Topic != "worker:library:3:status" || e.Type != health.EventWorker || e.Timestamp != c.UpdatedAt.UnixMilli() {
		t.Errorf("event = %+v", e)
	}
	if e.Worker == nil {
		t.Fatalf("event has no worker payload: %+v", e)
	}
	if w := *e.Worker; w.Component != "worker:library:3" || w.Status != "starting" || w.PID != 77 ||
		w.QueueType != "library" || w.ID != 3 || w.Host != "box-1" {
		t.Errorf("worker payload = %+v", w)
	}

	// A caller's own event replaces the default one; NoEvent writes none.
	own := health.Event{Topic: "worker:library:3:status", Type: health.EventAction, Timestamp: 5,
		Action: &health.ActionView{Action: "restart", Target: "worker:library:3"}}
	c.Status = health.StatusStopping
	if _, err := s.Write(ctx, c, health.Write{Actor: health.ActorOperator, Event: &own}); err != nil {
		t.Fatal(err)
	}
	c.Status = health.StatusStopped
	if _, err := s.Write(ctx, c, health.Write{Actor: health.ActorMonitor, NoEvent: true}); err != nil {
		t.Fatal(err)
	}
	msgs = events(t, s)
	if len(msgs) != 2 {
		t.Fatalf("%d events, want 2", len(msgs))
	}
	if e := decodeEvent(t, msgs[1]); e.Type != health.EventAction || e.Action == nil || e.Action.Action != "restart" {
		t.Errorf("own event stored as %+v", e)
	}
}

func TestWriteIndex(t *testing.T) {
	s, _ := newStore(t)
	ctx := testCtx(t)
	a := health.ComponentID{Queue: "tag", Slot: 10}
	b := health.ComponentID{Queue: "tag", Slot: 2}
	c := health.ComponentID{Queue: "calibration", Slot: 0}
	if _, err := s.Write(ctx, record(a, health.StatusStarting, 1), health.Write{}); err != nil {
		t.Fatal(err)
	}
	if ids, err := s.IDs(ctx); err != nil || len(ids) != 0 {
		t.Fatalf("IDs after a write without Index = %v, %v", ids, err)
	}
	for _, id := range []health.ComponentID{a, b, c} {
		if _, err := s.Write(ctx, record(id, health.StatusStarting, 1), health.Write{NoCheck: true, Index: true}); err != nil {
			t.Fatal(err)
		}
	}
	// A member that is not a component id (written by hand) is skipped.
	if err := s.Client().SAdd(ctx, s.Keys().Components(), "worker:../x").Err(); err != nil {
		t.Fatal(err)
	}
	ids, err := s.IDs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := []health.ComponentID{c, b, a}; !slices.Equal(ids, want) {
		t.Errorf("IDs = %v, want %v (by queue, then slot as a number)", ids, want)
	}
	list, err := s.List(ctx)
	if err != nil || len(list) != 3 || list[2].ID != a || list[2].Status != health.StatusStarting {
		t.Errorf("List = %+v, %v", list, err)
	}
}

func TestRestartHistoryRoundTrip(t *testing.T) {
	s, _ := newStore(t)
	ctx := testCtx(t)
	c := record(tag0, health.StatusCrashed, 9)
	c.Restarts = policy.State{
		RestartCount:     3,
		LifetimeRestarts: 7,
		// Two crashes in the same millisecond are two crashes.
		Crashes:       []time.Time{t0, t0, t0.Add(5 * time.Second), t0.Add(90 * time.Second)},
		LastRestart:   t0.Add(90 * time.Second),
		FailedAt:      t0.Add(100 * time.Second),
		FailureReason: policy.ReasonRapid,
	}
	if _, err := s.Write(ctx, c, health.Write{NoCheck: true, Restarts: true}); err != nil {
		t.Fatal(err)
	}
	got, err := s.Get(ctx, tag0)
	if err != nil {
		t.Fatal(err)
	}
	assertState(t, got.Restarts, c.Restarts)

	// A write without Restarts leaves the history alone.
	c.Status = health.StatusStopped
	c.Restarts = policy.State{}
	if _, err := s.Write(ctx, c, health.Write{Actor: health.ActorMonitor}); err != nil {
		t.Fatal(err)
	}
	got, err = s.Get(ctx, tag0)
	if err != nil {
		t.Fatal(err)
	}
	assertState(t, got.Restarts, policy.State{
		RestartCount: 3, LifetimeRestarts: 7,
		Crashes:     []time.Time{t0, t0, t0.Add(5 * time.Second), t0.Add(90 * time.Second)},
		LastRestart: t0.Add(90 * time.Second), FailedAt: t0.Add(100 * time.Second), FailureReason: policy.ReasonRapid,
	})

	// With Restarts the history is replaced whole: the window too.
	c.Restarts = policy.State{RestartCount: 0, LifetimeRestarts: 7, Crashes: []time.Time{t0.Add(time.Hour)}}
	if _, err := s.Write(ctx, c, health.Write{NoCheck: true, Restarts: true}); err != nil {
		t.Fatal(err)
	}
	got, err = s.Get(ctx, tag0)
	if err != nil {
		t.Fatal(err)
	}
	assertState(t, got.Restarts, c.Restarts)
	if n := s.Client().ZCard(ctx, s.Keys().Crashes(tag0)).Val(); n != 1 {
		t.Errorf("%s holds %d crashes, want 1", s.Keys().Crashes(tag0), n)
	}
}

func assertState(tb testing.TB, got, want policy.State) {
	tb.Helper()
	if got.RestartCount != want.RestartCount || got.LifetimeRestarts != want.LifetimeRestarts ||
		!got.LastRestart.Equal(want.LastRestart) || !got.FailedAt.Equal(want.FailedAt) ||
		got.FailureReason != want.FailureReason ||
		!slices.EqualFunc(got.Crashes, want.Crashes, time.Time.Equal) {
		tb.Errorf("restart history = %+v\nwant %+v", got, want)
	}
}

func TestGetMissing(t *testing.T) {
	s, _ := newStore(t)
	ctx := testCtx(t)
	known := health.ComponentID{Queue: "tag", Slot: 1}
	seed(t, s, record(known, health.StatusHealthy, 5))
	missing := health.ComponentID{Queue: "tag", Slot: 2}

	cs, err := s.GetMany(ctx, []health.ComponentID{missing, known})
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) != 2 {
		t.Fatalf("GetMany returned %d components, want 2", len(cs))
	}
	if cs[0].ID != missing || cs[0].Status != health.StatusNone || cs[0].PID != 0 {
		t.Errorf("missing component = %+v, want its id and StatusNone", cs[0])
	}
	if cs[1].ID != known || cs[1].Status != health.StatusHealthy || cs[1].PID != 5 {
		t.Errorf("known component = %+v", cs[1])
	}
	if _, err := s.Get(ctx, missing); !errors.Is(err, health.ErrNotFound) {
		t.Errorf("Get(missing) = %v, want ErrNotFound", err)
	}
	if c, err := s.Get(ctx, known); err != nil || c.Status != health.StatusHealthy {
		t.Errorf("Get(known) = %+v, %v", c, err)
	}
	if cs, err := s.GetMany(ctx, nil); err != nil || len(cs) != 0 {
		t.Errorf("GetMany(nil) = %v, %v", cs, err)
	}
}

func TestProbeMany(t *testing.T) {
	s, _ := newStore(t)
	ctx := testCtx(t)
	live := health.ComponentID{Queue: "tag", Slot: 0}
	gone := health.ComponentID{Queue: "tag", Slot: 1}
	c := record(live, health.StatusHealthy, 321)
	c.HealthySince = t0.Add(2 * time.Second)
	seed(t, s, c)
	seed(t, s, record(gone, health.StatusStarting, 654))
	const ttl = 30 * time.Second
	if err := s.Client().Set(ctx, s.Keys().Heartbeat(live), health.FormatHeartbeat(t0), ttl).Err(); err != nil {
		t.Fatal(err)
	}
	nobody := health.ComponentID{Queue: "tag", Slot: 2}

	ps, err := s.ProbeMany(ctx, []health.ComponentID{live, gone, nobody})
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 3 {
		t.Fatalf("%d probes, want 3", len(ps))
	}
	p := ps[0]
	if p.TTL <= ttl-5*time.Second || p.TTL > ttl {
		t.Errorf("live TTL = %v, want just under %v", p.TTL, ttl)
	}
	if p.Value != fmt.Sprint(t0.UnixMilli()) || !health.ValidHeartbeat(p.Value) {
		t.Errorf("live value = %q", p.Value)
	}
	if p.Status != health.StatusHealthy || p.PID != 321 || !p.HealthySince.Equal(c.HealthySince) {
		t.Errorf("live probe = %+v", p)
	}
	if p := ps[1]; p.TTL != 0 || p.Value != "" || p.Status != health.StatusStarting || p.PID != 654 {
		t.Errorf("probe without heartbeat = %+v, want TTL 0, no value, starting, pid 654", p)
	}
	if p := ps[2]; p != (health.Probe{}) {
		t.Errorf("probe of an unknown component = %+v, want zero", p)
	}
}

// SetPID's answer matters (issue 12, defect 8): a record that already names
// another process is not ours to give a pid, and the caller must hear it.
func TestSetPIDRefusedWhenTheRecordNamesAnotherPID(t *testing.T) {
	s, _ := newStore(t)
	seed(t, s, record(tag0, health.StatusStarting, 4100))
	before := hash(t, s, s.Keys().Component(tag0))
	c := record(tag0, health.StatusStarting, 4200)
	if err := s.SetPID(testCtx(t), c, ""); !errors.Is(err, health.ErrPIDTaken) {
		t.Errorf("SetPID over another pid: %v, want ErrPIDTaken", err)
	}
	if after := hash(t, s, s.Keys().Component(tag0)); after[health.FieldPID] != before[health.FieldPID] {
		t.Errorf("pid %s → %s", before[health.FieldPID], after[health.FieldPID])
	}
}

// Every record write raises rev, to at least Redis's clock in µs, and its
// event carries the record's current job as the write left it, not the
// writer's (issue 20, live current job): the worker writes current_job,
// the supervisor does not know it.
func TestWriteRevAndCurrentJob(t *testing.T) {
	s, _ := newStore(t)
	ctx := testCtx(t)
	c := record(tag0, health.StatusHealthy, 4242)
	c.UpdatedAt = t0.Add(time.Minute)
	if _, err := s.Write(ctx, c, health.Write{NoCheck: true, NoEvent: true}); err != nil {
		t.Fatal(err)
	}
	rev := func() int64 {
		t.Helper()
		got, err := s.Get(ctx, tag0)
		if err != nil {
			t.Fatal(err)
		}
		return got.Rev
	}
	before := time.Now().Add(-time.Minute).UnixMicro() // Redis's clock, give or take
	r1 := rev()
	if r1 < before {
		t.Fatalf("rev = %d, want Redis's clock in µs (about %d)", r1, before)
	}
	pipe := s.Client().Pipeline()
	s.SetCurrentJobTo(ctx, pipe, tag0, "t9", 3)
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	if r := rev(); r != r1 {
		t.Errorf("the worker's current-job write moved rev %d → %d", r1, r)
	}
	// A write stamped earlier (another host's clock) still raises it.
	c.Status, c.UpdatedAt = health.StatusStopping, t0
	if _, err := s.Write(ctx, c, health.Write{Actor: health.ActorOperator}); err != nil {
		t.Fatal(err)
	}
	r2 := rev()
	if r2 <= r1 {
		t.Errorf("rev after an earlier-stamped write = %d, want above %d", r2, r1)
	}
	msgs := events(t, s)
	e := decodeEvent(t, msgs[len(msgs)-1])
	if e.Worker == nil || e.Worker.Status != "stopping" || e.Worker.CurrentJob != "t9" || e.Worker.CurrentSeq != 3 || e.Worker.Rev != r2 {
		t.Errorf("event = %+v", e.Worker)
	}
}

// A record re-created after Redis lost it starts its rev above the one it
// replaces (the broker and the dashboard drop a worker view with a lower
// rev than one they have shown, and they outlive Redis's data), whoever
// re-creates it: the supervisor's rewrite of its own last record (stamped
// with that record's updated_at, from before the loss), or the heartbeat of
// a worker whose clock is behind the writer of the lost rev. Before, rev
// came from the writer's stamp: both re-created records started below, and
// their worker_updates were dropped as older.
func TestRevAboveTheLostRecord(t *testing.T) {
	s, _ := newStore(t)
	ctx := testCtx(t)
	lose := func() {
		t.Helper()
		if err := s.Client().Del(ctx, s.Keys().Component(tag0)).Err(); err != nil {
			t.Fatal(err)
		}
	}
	// The supervisor's last write of its record, a while ago; then a
	// change stamped now (the heartbeat's healthy, another host's write).
	c := record(tag0, health.StatusHealthy, beatPID)
	c.UpdatedAt = time.Now().Add(-time.Minute).Truncate(time.Millisecond)
	if _, err := s.Write(ctx, c, health.Write{NoCheck: true, NoEvent: true}); err != nil {
		t.Fatal(err)
	}
	now := c
	now.UpdatedAt = time.Now()
	if _, err := s.Write(ctx, now, health.Write{NoCheck: true, NoEvent: true}); err != nil {
		t.Fatal(err)
	}
	shown := hash(t, s, s.Keys().Component(tag0))[health.FieldRev]
	lose()
	// The supervisor writes its record back (supervisor.rewriteState).
	if _, err := s.Write(ctx, c, health.Write{NoCheck: true, Restarts: true, Index: true}); err != nil {
		t.Fatal(err)
	}
	re := hash(t, s, s.Keys().Component(tag0))[health.FieldRev]
	if n, m := atoi(t, re), atoi(t, shown); n <= m {
		t.Errorf("rev of the record the supervisor wrote back = %d, below the lost one's %d", n, m)
	}
	msgs := events(t, s)
	if e := decodeEvent(t, msgs[len(msgs)-1]); e.Worker == nil || fmt.Sprint(e.Worker.Rev) != re {
		t.Errorf("its event: %+v, want rev %s", e.Worker, re)
	}
	shown = re
	lose()
	// A worker whose clock is behind (the fake clock at t0) re-creates it.
	h, _ := newHeartbeater(t, s)
	if r, err := h.Beat(ctx); err != nil || r != health.BeatRecreated {
		t.Fatalf("beat: %v, %v", r, err)
	}
	if n, m := atoi(t, hash(t, s, s.Keys().Component(tag0))[health.FieldRev]), atoi(t, shown); n <= m {
		t.Errorf("rev of the record a beat re-created = %d, below the lost one's %d", n, m)
	}
}

func atoi(tb testing.TB, s string) int64 {
	tb.Helper()
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		tb.Fatalf("%q: %v", s, err)
	}
	return n
}
