package server

import (
	"io"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/vigil-dev/vigil/internal/clock"
)

// hostileSubscription is what one client may subscribe with at most,
// built from the worst patterns: each names as many segments as allowed,
// all stars, but for a last literal that never matches (so that every
// split is tried), and patterns differ by that literal.
func hostileSubscription(tb testing.TB, conn int) subscription {
	tb.Helper()
	for stars := 128; stars >= 1; stars /= 2 {
		raw := make([]string, MaxPatterns)
		for i := range raw {
			raw[i] = strings.Repeat("*:", stars) + "x" + strconv.Itoa(conn) + "p" + strconv.Itoa(i)
			if len(raw[i]) > MaxPatternLen {
				raw[i] = strings.Repeat("*:", stars-2) + "x" + strconv.Itoa(conn) + "p" + strconv.Itoa(i)
			}
		}
		if sub, err := parseSubscription(raw); err == nil {
			return sub
		}
	}
	tb.Fatal("no hostile subscription is accepted")
	return subscription{}
}

// BenchmarkFanOutHostile (issue 18, row 6): one client's connections, as
// many as it may open (3,000 where nothing caps them, else the per-address
// cap), each with the costliest subscription accepted; ns/event is the
// broker's cost per event, lock-wait-max-us the longest another
// connection waited for the broker's lock meanwhile.
func BenchmarkFanOutHostile(b *testing.B) {
	conns := 3000
	if c := (SSEConfig{}).withDefaults().MaxClientsPerAddress; c > 0 {
		conns = c
	}
	br := newBroker(SSEConfig{}, nil, slog.New(slog.NewTextHandler(io.Discard, nil)), clock.Real{}, nil, nil)
	for i := range conns {
		benchAddGroup(br, hostileSubscription(b, i))
	}
	msgs := make([]redis.XMessage, 100)
	for i := range msgs {
		topic := "worker:tag:" + strconv.Itoa(i%10) + ":status"
		if i%2 == 1 {
			topic = "job:tag:" + strconv.Itoa(i)
		}
		msgs[i] = redis.XMessage{ID: "1-" + strconv.Itoa(i+1), Values: map[string]any{"topic": topic, "type": "worker_update", "data": "{}"}}
	}
	var waits []time.Duration
	var mu sync.Mutex
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			t := time.Now()
			br.mu.Lock()
			d := time.Since(t)
			br.mu.Unlock()
			mu.Lock()
			waits = append(waits, d)
			mu.Unlock()
			time.Sleep(100 * time.Microsecond)
		}
	})
	n := 0
	for b.Loop() {
		br.mu.Lock()
		br.pos = zeroID
		br.mu.Unlock()
		br.fanOut(msgs)
		n += len(msgs)
	}
	close(stop)
	wg.Wait()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n), "ns/event")
	mu.Lock()
	defer mu.Unlock()
	if len(waits) > 0 {
		b.ReportMetric(float64(slices.Max(waits).Microseconds()), "lock-wait-max-us")
	}
	b.ReportMetric(float64(conns), "conns")
}

// benchAddGroup adds a group as a joining client would.
func benchAddGroup(b *broker, sub subscription) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.groups[sub.key] = &group{sub: sub, clients: map[*client]struct{}{}}
	b.fresh[sub.key] = b.groups[sub.key]
	b.subsGen++
}
