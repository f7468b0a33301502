package server

import (
	"log/slog"
	"math"
	"strconv"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// maxThrottled bounds the clients the login guard remembers; past it,
// those whose budget is full again are forgotten first.
const maxThrottled = 10_000

// failedLoginLogEvery is the least time between two log lines about failed
// logins; the lines between are counted in the next one.
const failedLoginLogEvery = 10 * time.Second

// loginGuard throttles wrong tokens per client (FailedLoginBurst in a row,
// then one per FailedLoginEvery) and logs them without flooding the log.
type loginGuard struct {
	mu      sync.Mutex
	clients map[string]*rate.Limiter
	log     *slog.Logger
	// logged is when the last line was written; since counts the failures
	// and refusals not yet logged.
	logged             time.Time
	failures, refusals int
}

func newLoginGuard(log *slog.Logger) *loginGuard {
	return &loginGuard{clients: map[string]*rate.Limiter{}, log: log}
}

// wait returns how long client must wait before its next try (0: it may
// try now).
func (g *loginGuard) wait(client string, now time.Time) time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	l := g.clients[client]
	if l == nil {
		return 0
	}
	if l.TokensAt(now) >= 1 {
		return 0
	}
	g.refusals++
	g.note(client, "throttled", now)
	r := l.ReserveN(now, 1)
	d := r.DelayFrom(now)
	r.CancelAt(now)
	return max(d, time.Second)
}

// failed records a wrong token from client (what: how it was sent).
func (g *loginGuard) failed(client, what string, now time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	l := g.clients[client]
	if l == nil {
		if len(g.clients) >= maxThrottled {
			g.sweep(now)
		}
		l = rate.NewLimiter(rate.Every(FailedLoginEvery), FailedLoginBurst)
		g.clients[client] = l
	}
	l.AllowN(now, 1)
	g.failures++
	g.note(client, what, now)
}

// sweep forgets clients whose budget has refilled; if none has, all.
func (g *loginGuard) sweep(now time.Time) {
	for c, l := range g.clients {
		if l.TokensAt(now) >= FailedLoginBurst {
			delete(g.clients, c)
		}
	}
	if len(g.clients) >= maxThrottled {
		clear(g.clients)
	}
}

// note writes a log line at most every failedLoginLogEvery (mu held).
func (g *loginGuard) note(client, what string, now time.Time) {
	if !g.logged.IsZero() && now.Sub(g.logged) < failedLoginLogEvery {
		return
	}
	g.logged = now
	g.log.Warn("failed admin login", slog.String("client", client), slog.String("via", what),
		slog.Int("failed", g.failures), slog.Int("throttled", g.refusals),
		slog.Duration("counted_over", failedLoginLogEvery))
	g.failures, g.refusals = 0, 0
}

// retryAfter formats d for a Retry-After header (whole seconds, rounded
// up).
func retryAfter(d time.Duration) string {
	return strconv.Itoa(int(math.Ceil(d.Seconds())))
}
