package supervisor

import (
	"context"
	"fmt"
	"time"

	"github.com/vigil-dev/vigil/health"
)

// RollingRestart restarts the pool's workers one at a time, cluster-wide
// (for deploys; failed and held workers are left alone): each is restarted (on whichever host holds it) and the next
// waits until it is healthy again, or start_timeout passed. It returns at
// once with the number of workers it will restart; the rollout runs until
// done or until the supervisor stops.
func (s *Supervisor) RollingRestart(ctx context.Context, queue string) (int, error) {
	sizes, err := PoolSizes(ctx, s.store)
	if err != nil {
		return 0, err
	}
	n, ok := sizes[queue]
	if !ok {
		return 0, fmt.Errorf("pool %s: %w", queue, ErrUnknownComponent)
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		rctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() {
			select {
			case <-s.stopCmds:
				cancel()
			case <-rctx.Done():
			}
		}()
		s.log.Info("rolling restart", "queue", queue, "workers", n)
		for slot := range n {
			id := health.ComponentID{Queue: queue, Slot: slot}
			if c, err := s.store.Get(rctx, id); err == nil && (c.Status == health.StatusFailed || (c.Status == health.StatusStopped && c.Held)) {
				s.log.Info("rolling restart: leaving a failed or held worker as it is", "component", id.String(), "status", string(c.Status))
				continue
			}
			if _, err := s.Restart(rctx, id); err != nil {
				s.log.Warn("rolling restart: skipping", "component", id.String(), "err", err)
				continue
			}
			if !s.waitHealthy(rctx, id, s.cfg.Heartbeat.StartTimeout) {
				if rctx.Err() != nil {
					return
				}
				s.log.Warn("rolling restart: not healthy in time, going on", "component", id.String())
			}
		}
		s.log.Info("rolling restart done", "queue", queue)
	}()
	return n, nil
}

// waitHealthy polls id's record until it is healthy, ctx ends or timeout.
func (s *Supervisor) waitHealthy(ctx context.Context, id health.ComponentID, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		c, err := s.store.Get(ctx, id)
		if err == nil && c.Status == health.StatusHealthy {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(100 * time.Millisecond):
		}
	}
	return false
}
