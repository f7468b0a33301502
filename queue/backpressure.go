package queue

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// backpressure pauses this process's dequeues (docs/design.md §6): while the
// queue holds more than high_watermark pending tasks and the host's load is
// above load_threshold, the dequeue hook refuses dequeues for
// pause_interval, then the condition is judged again. It is host-local:
// asynq's queue pause would stop every host. Off when high_watermark is 0.
type backpressure struct {
	w     *worker
	load  func() (float64, error)
	every time.Duration
}

func (w *worker) newBackpressure(cfg WorkerConfig) *backpressure {
	if w.env.Backpressure.HighWatermark <= 0 {
		return nil
	}
	b := &backpressure{w: w, load: cfg.Load, every: cfg.BackpressureCheck}
	if b.load == nil {
		b.load = hostLoad
	}
	if b.every <= 0 {
		b.every = BackpressureCheckDefault
	}
	return b
}

// judge closes or opens the gate and returns when to judge again.
func (b *backpressure) judge(ctx context.Context) time.Duration {
	w, bp := b.w, b.w.env.Backpressure
	depth, l, over := w.overloaded(ctx, b.load)
	switch {
	case over:
		if !w.hook.closed.Swap(true) {
			w.log.Warn("backpressure: this worker stops dequeuing", "pending", depth, "load", l,
				"high_watermark", bp.HighWatermark, "load_threshold", bp.LoadThreshold, "pause", bp.PauseInterval)
		}
		w.metrics.BackpressurePauses.Add(1)
		return bp.PauseInterval
	case w.hook.closed.Swap(false):
		w.log.Info("backpressure: dequeuing again", "pending", depth, "load", l)
	}
	return b.every
}

// run judges again and again until ctx ends, starting after next.
func (b *backpressure) run(ctx context.Context, next time.Duration) {
	tick := make(chan struct{}, 1)
	defer b.w.hook.closed.Store(false)
	for {
		t := b.w.clock.AfterFunc(next, func() {
			select {
			case tick <- struct{}{}:
			default:
			}
		})
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-tick:
		}
		next = b.judge(ctx)
	}
}

// overloaded judges the backpressure condition; a failed reading counts as
// not overloaded.
func (w *worker) overloaded(ctx context.Context, load func() (float64, error)) (depth int64, l float64, over bool) {
	octx, cancel := opCtx(ctx)
	defer cancel()
	depth, err := w.rdb.LLen(octx, asynqPendingKey(w.q)).Result()
	if err != nil {
		w.log.Debug("backpressure: read queue depth", "err", err)
		return 0, 0, false
	}
	if depth <= int64(w.env.Backpressure.HighWatermark) {
		return depth, 0, false
	}
	if l, err = load(); err != nil {
		w.log.Debug("backpressure: read host load", "err", err)
		return depth, 0, false
	}
	return depth, l, l > w.env.Backpressure.LoadThreshold
}

// hostLoad is the 1-minute load average per CPU.
func hostLoad() (float64, error) {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0, fmt.Errorf("empty /proc/loadavg")
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return 0, fmt.Errorf("/proc/loadavg: %w", err)
	}
	return v / float64(runtime.NumCPU()), nil
}

// setPaused opens or closes the operator's gate of this worker (package
// health's WorkerPause, read by the reporter): a paused worker takes no
// task, keeps beating and finishes what it runs.
func (w *worker) setPaused(paused bool) {
	if w.hook.paused.Swap(paused) != paused {
		if paused {
			w.log.Info("paused by an operator: this worker takes no task until resumed")
		} else {
			w.log.Info("resumed by an operator: taking tasks again")
		}
	}
}
