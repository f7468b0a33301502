package health

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/vigil-dev/vigil/internal/clock"
)

// Heartbeat defaults (docs/design.md §4, §10).
const (
	HeartbeatIntervalDefault = 5 * time.Second
	HeartbeatTTLDefault      = 30 * time.Second
	StartTimeoutDefault      = 60 * time.Second
	// RecoverMinDefault and RecoverMaxDefault bound a recovering window
	// (Heartbeater.Recover; heartbeat.recover_min and recover_max).
	RecoverMinDefault = 5 * time.Second
	RecoverMaxDefault = 120 * time.Second
	// MaxRecoverReason bounds a recovering window's reason (bytes).
	MaxRecoverReason = 200
	// DegradedAfter is how many failed beats in a row log HEARTBEAT_DEGRADED.
	DegradedAfter = 3
	// StaleAfter is how many stale answers in a row, an interval apart, make
	// Run give up. One is not enough: a worker started while Redis was away
	// may find Redis back with its predecessor's record for a moment, until
	// the supervisor writes the record back.
	StaleAfter = 2
)

// ErrStale is returned by a heartbeat whose process is not the one the
// record names: the caller must exit.
var ErrStale = errors.New("stale worker: the component record names another process")

// BeatResult says what a heartbeat did.
type BeatResult int

// Beat results.
const (
	BeatWritten   BeatResult = iota // heartbeat written
	BeatHealthy                     // written, and starting became healthy
	BeatRecreated                   // written, and the missing record re-created
	// BeatPending: nothing written, the record is starting without a pid
	// yet (the supervisor records it right after the fork). Beat tries a
	// few times before answering it; the next beat tries again.
	BeatPending
	// BeatRecovering: written with a recovering window (Recover).
	BeatRecovering
)

// pendingTries and pendingWait bound how long Beat waits for the
// supervisor to record the new process's pid (one Redis round trip after
// the fork, normally long before the child's first beat).
const (
	pendingTries = 10
	pendingWait  = 20 * time.Millisecond
)

// Heartbeater writes one worker's heartbeats (worker side).
type Heartbeater struct {
	Store     *Store
	ID        ComponentID
	PID       int
	Host      string
	StartedAt time.Time
	Interval  time.Duration
	TTL       time.Duration
	Logger    *slog.Logger
	Clock     clock.Clock
	// RecoverMin and RecoverMax bound a recovering window (0:
	// RecoverMinDefault, RecoverMaxDefault); the script clamps to them.
	RecoverMin time.Duration
	RecoverMax time.Duration
	// Version is recorded in the worker's record ("" = none).
	Version string

	holdUntil atomic.Int64 // Unix ms: Run sends no ordinary beat before (a recovering window)

	failures atomic.Int64 // failed beats in a row
	stale    int          // stale answers in a row (Run's goroutine only)
	beats    atomic.Int64 // beats written
	failed   atomic.Int64 // beats failed, in all
	degraded atomic.Int64 // times HEARTBEAT_DEGRADED was logged
}

// Failed returns how many beats failed in all.
func (h *Heartbeater) Failed() int64 { return h.failed.Load() }

// Degraded returns how many times the heartbeat turned degraded
// (DegradedAfter failures in a row).
func (h *Heartbeater) Degraded() int64 { return h.degraded.Load() }

// Failures returns how many beats in a row have failed.
func (h *Heartbeater) Failures() int64 { return h.failures.Load() }

// Beats returns how many beats were written.
func (h *Heartbeater) Beats() int64 { return h.beats.Load() }

func (h *Heartbeater) clock() clock.Clock {
	if h.Clock == nil {
		return clock.Real{}
	}
	return h.Clock
}

func (h *Heartbeater) logger() *slog.Logger {
	if h.Logger == nil {
		return slog.Default()
	}
	return h.Logger
}

// Beat writes one heartbeat in one round trip (two after a transition, to
// announce it). It returns ErrStale when the process must exit, and
// BeatPending, having written nothing, when the record still waits for
// this process's pid.
func (h *Heartbeater) Beat(ctx context.Context) (BeatResult, error) {
	r, _, err := h.beat(ctx, 0, "")
	return r, err
}

// Recover writes a heartbeat that opens a recovering window of d (clamped
// to RecoverMin–RecoverMax) with reason: the key lives until the window
// ends and the record says recovering (TestRecoverWindowThenBeatIsHealthy).
// It returns the window granted (0 when the record is stopping: then it
// was an ordinary beat).
// Until one interval before the window ends, Run sends no ordinary beat
// (one would end the window), unless EndRecovery is called first; a
// process that cannot beat by the window's end is judged hung.
func (h *Heartbeater) Recover(ctx context.Context, d time.Duration, reason string) (time.Duration, error) {
	if d <= 0 {
		return 0, fmt.Errorf("recover %s: the window must be > 0, got %s", h.ID, d)
	}
	if len(reason) > MaxRecoverReason {
		reason = reason[:MaxRecoverReason]
	}
	r, window, err := h.beat(ctx, max(d.Milliseconds(), 1), reason)
	if err != nil {
		return 0, err
	}
	if r != BeatRecovering {
		return 0, nil
	}
	if hold := window - h.Interval; hold > 0 {
		h.holdUntil.Store(h.clock().Now().Add(hold).UnixMilli())
	}
	return window, nil
}

// EndRecovery lets Run's next ordinary beat end a recovering window.
func (h *Heartbeater) EndRecovery() { h.holdUntil.Store(0) }

// holding reports whether Run must not beat now: a recovering window is on.
func (h *Heartbeater) holding() bool {
	u := h.holdUntil.Load()
	return u != 0 && h.clock().Now().UnixMilli() < u
}

func (h *Heartbeater) recoverBounds() (lo, hi int64) {
	return cmp.Or(h.RecoverMin, RecoverMinDefault).Milliseconds(), cmp.Or(h.RecoverMax, RecoverMaxDefault).Milliseconds()
}

// beat runs the heartbeat script; recoverMS > 0 asks for a recovering
// window. It returns the window granted, with BeatRecovering.
func (h *Heartbeater) beat(ctx context.Context, recoverMS int64, reason string) (BeatResult, time.Duration, error) {
	k := h.Store.keys
	lo, hi := h.recoverBounds()
	var code, window int64
	var status string
	for try := 1; ; try++ {
		now := h.clock().Now()
		res, err := heartbeatScript.Run(ctx, h.Store.rdb, []string{k.Heartbeat(h.ID), k.Component(h.ID)},
			h.PID, now.UnixMilli(), h.TTL.Milliseconds(), h.Host, h.ID.Queue, h.ID.Slot, ms(h.StartedAt),
			recoverMS, reason, lo, hi, h.Version).Slice()
		if err != nil {
			return 0, 0, fmt.Errorf("heartbeat %s: %w", h.ID, err)
		}
		code, _ = res[0].(int64)
		status, _ = res[1].(string)
		if len(res) > 2 {
			window, _ = res[2].(int64)
		}
		if BeatResult(code) != BeatPending || try == pendingTries {
			break
		}
		t := time.NewTimer(pendingWait) // waiting on another process's write
		select {
		case <-ctx.Done():
			t.Stop()
			return BeatPending, 0, nil
		case <-t.C:
		}
	}
	if code < 0 {
		return 0, 0, fmt.Errorf("%w (%s is %q)", ErrStale, h.ID, status)
	}
	r := BeatResult(code)
	if r == BeatPending {
		return r, 0, nil
	}
	if r == BeatHealthy || r == BeatRecreated || r == BeatRecovering {
		h.announce(ctx, r)
	}
	return r, time.Duration(window) * time.Millisecond, nil
}

// announce writes the event (and the index entry) of a transition the
// heartbeat made. Failures only cost the notification: the record is right.
func (h *Heartbeater) announce(ctx context.Context, r BeatResult) {
	if r == BeatRecreated {
		if err := h.Store.rdb.SAdd(ctx, h.Store.keys.Components(), h.ID.String()).Err(); err != nil {
			h.logger().Warn("index component", "component", h.ID.String(), "err", err)
		}
	}
	c, err := h.Store.Get(ctx, h.ID)
	if err != nil {
		h.logger().Warn("read component after heartbeat", "component", h.ID.String(), "err", err)
		return
	}
	if _, err := h.Store.AddEvent(ctx, WorkerEvent(c, h.clock().Now())); err != nil {
		h.logger().Warn("announce healthy", "component", h.ID.String(), "err", err)
	}
}

// Run beats at once and then every Interval until ctx ends. A failed beat is
// logged and retried at the next interval; after DegradedAfter failures in a
// row it logs HEARTBEAT_DEGRADED and goes on: the worker keeps working. It
// returns ErrStale (wrapped) once the record has named another process
// StaleAfter times in a row, and nil when ctx ends.
func (h *Heartbeater) Run(ctx context.Context) error {
	tick := make(chan struct{}, 1)
	for {
		if err := h.once(ctx); err != nil {
			return err
		}
		t := h.clock().AfterFunc(h.Interval, func() {
			select {
			case tick <- struct{}{}:
			default:
			}
		})
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-tick:
		}
	}
}

func (h *Heartbeater) once(ctx context.Context) error {
	if h.holding() {
		return nil // the recovering window's key still lives
	}
	bctx, cancel := context.WithTimeout(ctx, h.Interval)
	defer cancel()
	res, err := h.Beat(bctx)
	switch {
	case err == nil:
		h.stale = 0
		if res != BeatPending {
			h.beats.Add(1)
		}
		if h.failures.Swap(0) >= DegradedAfter {
			h.logger().Info("HEARTBEAT_RECOVERED", "component", h.ID.String())
		}
		return nil
	case errors.Is(err, ErrStale):
		if h.stale++; h.stale >= StaleAfter {
			return err
		}
		h.logger().Warn("heartbeat refused as stale; trying once more", "component", h.ID.String(), "err", err)
		return nil
	case ctx.Err() != nil:
		return nil
	}
	n := h.failures.Add(1)
	h.failed.Add(1)
	if n == DegradedAfter {
		h.degraded.Add(1)
		h.logger().Error("HEARTBEAT_DEGRADED", "component", h.ID.String(), "failures", n, "err", err)
	} else {
		h.logger().Warn("heartbeat failed", "component", h.ID.String(), "failures", n, "err", err)
	}
	return nil
}

// FormatHeartbeat is the value a heartbeat key holds.
func FormatHeartbeat(t time.Time) string { return strconv.FormatInt(t.UnixMilli(), 10) }
