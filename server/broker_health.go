package server

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/vigil-dev/vigil/health"
)

// TopicHealth is the topic of the cluster's health.
const TopicHealth = "system:health"

// healthGap is the least time between two health computations: a burst of
// worker changes costs one.
const healthGap = 100 * time.Millisecond

// healthSettle is how long a computation waits after the change that woke
// it: the change's own event reaches the event clients first (computing at
// once competed with that delivery for the processor: Redis reads, JSON),
// and the changes that follow it (a crash, then its restart) count once.
const healthSettle = 5 * time.Millisecond

// healthSwapScript stores the announced health unless it is already the
// stored one: 1 when it changed (announce it), 0 when not.
// KEYS: the health key. ARGV: status and reasons.
var healthSwapScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[1])
return 1
`)

// healthWatcher announces health_update events on system:health when the
// computed health (status and reasons) changes. Every admin server runs
// one, woken by the worker and host entries its broker reads; a shared key
// makes each change announced once across them.
type healthWatcher struct {
	s    *server
	wake chan struct{}
}

func newHealthWatcher(s *server) *healthWatcher {
	return &healthWatcher{s: s, wake: make(chan struct{}, 1)}
}

// notify is the broker's onEntry: worker and host changes may change the
// health.
func (h *healthWatcher) notify(typ, topic string) {
	if typ == health.EventWorker || typ == health.EventWorkerRemoved || strings.HasPrefix(topic, "host:") {
		h.poke()
	}
}

func (h *healthWatcher) poke() {
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

// run computes and announces until ctx ends, once at start and then after
// each wake-up (at most once per healthGap).
func (h *healthWatcher) run(ctx context.Context) {
	h.poke()
	for {
		select {
		case <-ctx.Done():
			return
		case <-h.wake:
		}
		settle := time.NewTimer(healthSettle)
		select {
		case <-ctx.Done():
			settle.Stop()
			return
		case <-settle.C:
		}
		h.check(ctx)
		t := time.NewTimer(healthGap)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

func (h *healthWatcher) check(ctx context.Context) {
	r := h.s.healthReport(ctx)
	if r.Status == StatusError {
		return // Redis does not answer: nothing can be announced there
	}
	state := r.Status + "\n" + strings.Join(r.Reasons, "\n")
	rdb := h.s.store.Client()
	n, err := healthSwapScript.Run(ctx, rdb, []string{h.s.store.Keys().Health()}, state).Int()
	if err != nil || n == 0 {
		if err != nil && ctx.Err() == nil {
			h.s.log.Warn("events: store the announced health", "err", err)
		}
		return
	}
	data, _ := json.Marshal(r)
	if _, err := h.s.store.AddEvent(ctx, health.Event{Topic: TopicHealth, Type: health.EventHealth, Timestamp: r.CheckedAt, Data: data}); err != nil && ctx.Err() == nil {
		h.s.log.Warn("events: announce health", "err", err)
	}
}
