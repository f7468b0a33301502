package chaos_test

import (
	"context"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/internal/testledger"
)

// ledger reads what chaosworker processes wrote about every run (see
// internal/testledger): it lives in a redis-server of its own, so it
// survives whatever the test does to Vigil's Redis.
type ledger struct {
	t   *testing.T
	srv *redisProc
	r   *testledger.Reader
}

func newLedger(t *testing.T) *ledger {
	t.Helper()
	srv := newRedis(t)
	return &ledger{t: t, srv: srv, r: testledger.NewReader(srv.c, "ledger:")}
}

// env is what a pool needs to write to the ledger.
func (l *ledger) env() map[string]string {
	return map[string]string{testledger.EnvURL: l.srv.URL, testledger.EnvPrefix: l.r.Prefix()}
}

func (l *ledger) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 10*time.Second)
}

func (l *ledger) counts(name string) map[string]int {
	l.t.Helper()
	ctx, cancel := l.ctx()
	defer cancel()
	m, err := l.r.Counts(ctx, name)
	if err != nil {
		l.t.Fatal(err)
	}
	return m
}

// completions: task → handler successes.
func (l *ledger) completions() map[string]int { return l.counts("completions") }

// runs: task → handler starts.
func (l *ledger) runs() map[string]int { return l.counts("runs") }

// completers: task → pids whose handler completed it, in order.
func (l *ledger) completers() map[string][]int {
	l.t.Helper()
	ctx, cancel := l.ctx()
	defer cancel()
	m, err := l.r.PIDLists(ctx, "completers")
	if err != nil {
		l.t.Fatal(err)
	}
	return m
}

// owners: task → pid whose handler is inside it now (or was, when it died).
func (l *ledger) owners() map[string]int { return l.counts("owners") }

// done is how many distinct tasks completed at least once.
func (l *ledger) done() int {
	l.t.Helper()
	ctx, cancel := l.ctx()
	defer cancel()
	n, err := l.r.Done(ctx)
	if err != nil {
		l.t.Fatal(err)
	}
	return n
}

// violations: handlers that started inside a task another live process's
// handler was still in.
func (l *ledger) violations() []string {
	l.t.Helper()
	ctx, cancel := l.ctx()
	defer cancel()
	v, err := l.r.Violations(ctx)
	if err != nil {
		l.t.Fatal(err)
	}
	return v
}

// tally is what a scenario measured about its jobs.
type tally struct {
	jobs, lost, duplicated int
	unexplained            []string // repeated completions not explained by a killed process
}

// judge counts, for the tasks ids, those never completed (lost) and those
// completed more than once (duplicated); see testledger.Judge.
func (l *ledger) judge(ids []string, killed map[int]bool, excused map[string]bool) tally {
	l.t.Helper()
	tl := testledger.Judge(ids, l.completions(), l.completers(), killed, excused)
	return tally{jobs: tl.Jobs, lost: tl.Lost, duplicated: tl.Duplicated, unexplained: tl.Unexplained}
}
