package queue

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
)

// backpressure pauses this process's dequeues (DESIGN.md §6): while the
// queue holds more than high_watermark pending tasks and the host's load is
// above load_threshold, the dequeue hook refuses dequeues for
// pause_interval, then the condition is judged again. It is host-local:
// asynq's queue pause would stop every host. Off when high_watermark is 0.
func (w *worker) backpressure(ctx context.Context, cfg WorkerConfig) {
	bp := w.env.Backpressure
	if bp.HighWatermark <= 0 {
		return
	}
	load := cfg.Load
	if load == nil {
		load = hostLoad
	}
	every := cfg.BackpressureCheck
	if every <= 0 {
		every = BackpressureCheckDefault
	}
	tick := make(chan struct{}, 1)
	defer w.hook.closed.Store(false)
	for {
		next := every
		depth, l, over := w.overloaded(ctx, load)
		switch {
		case over:
			if !w.hook.closed.Swap(true) {
				w.log.Warn("backpressure: this worker stops dequeuing", "pending", depth, "load", l,
					"high_watermark", bp.HighWatermark, "load_threshold", bp.LoadThreshold, "pause", bp.PauseInterval)
			}
			w.metrics.BackpressurePauses.Add(1)
			next = bp.PauseInterval
		case w.hook.closed.Swap(false):
			w.log.Info("backpressure: dequeuing again", "pending", depth, "load", l)
		}
		t := w.clock.AfterFunc(next, func() {
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
