package chaos_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// ledger reads what chaosworker processes wrote about every run (see
// internal/chaosworker): it lives in a redis-server of its own, so it
// survives whatever the test does to Vigil's Redis.
type ledger struct {
	t      *testing.T
	srv    *redisProc
	prefix string
}

func newLedger(t *testing.T) *ledger {
	t.Helper()
	return &ledger{t: t, srv: newRedis(t), prefix: "ledger:"}
}

// env is what a pool needs to write to the ledger.
func (l *ledger) env() map[string]string {
	return map[string]string{"CHAOS_LEDGER_URL": l.srv.URL, "CHAOS_LEDGER": l.prefix}
}

func (l *ledger) hash(name string) map[string]string {
	l.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h, err := l.srv.c.HGetAll(ctx, l.prefix+name).Result()
	if err != nil {
		l.t.Fatalf("read ledger %s: %v", name, err)
	}
	return h
}

func (l *ledger) counts(name string) map[string]int {
	l.t.Helper()
	out := map[string]int{}
	for k, v := range l.hash(name) {
		out[k], _ = strconv.Atoi(v)
	}
	return out
}

// completions: task → handler successes.
func (l *ledger) completions() map[string]int { return l.counts("completions") }

// runs: task → handler starts.
func (l *ledger) runs() map[string]int { return l.counts("runs") }

// completers: task → pids whose handler completed it, in order.
func (l *ledger) completers() map[string][]int {
	out := map[string][]int{}
	for k, v := range l.hash("completers") {
		for _, f := range strings.Split(v, ",") {
			pid, _ := strconv.Atoi(f)
			out[k] = append(out[k], pid)
		}
	}
	return out
}

// doneBetween returns the tasks that first completed between from and to.
func (l *ledger) doneBetween(from, to time.Time) map[string]bool {
	out := map[string]bool{}
	for k, v := range l.hash("first_done") {
		ms, _ := strconv.ParseInt(v, 10, 64)
		if at := time.UnixMilli(ms); !at.Before(from) && !at.After(to) {
			out[k] = true
		}
	}
	return out
}

// owners: task → pid whose handler is inside it now (or was, when it died).
func (l *ledger) owners() map[string]int {
	out := map[string]int{}
	for k, v := range l.hash("owners") {
		out[k], _ = strconv.Atoi(v)
	}
	return out
}

// done is how many distinct tasks completed at least once.
func (l *ledger) done() int {
	l.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n, err := l.srv.c.HLen(ctx, l.prefix+"completions").Result()
	if err != nil && err != redis.Nil {
		l.t.Fatalf("read ledger: %v", err)
	}
	return int(n)
}

// violations: handlers that started inside a task another live process's
// handler was still in.
func (l *ledger) violations() []string {
	l.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	v, err := l.srv.c.LRange(ctx, l.prefix+"violations", 0, -1).Result()
	if err != nil {
		l.t.Fatalf("read ledger violations: %v", err)
	}
	return v
}

// tally is what a scenario measured about its jobs.
type tally struct {
	jobs, lost, duplicated int
	unexplained            []string // repeated completions not explained by a killed process
}

// judge counts, for the tasks ids, those never completed (lost) and those
// completed more than once (duplicated). A repeated completion is
// explained only when every completion but the last was made by a process
// in killed (it finished the handler and died before asynq recorded it:
// delivery is at least once), or by a task in excused (the scenario says
// why).
func (l *ledger) judge(ids []string, killed map[int]bool, excused map[string]bool) tally {
	l.t.Helper()
	comp, by := l.completions(), l.completers()
	tl := tally{jobs: len(ids)}
	for _, id := range ids {
		switch n := comp[id]; {
		case n == 0:
			tl.lost++
		case n > 1:
			tl.duplicated++
			pids := by[id]
			ok := excused[id]
			if !ok {
				ok = true
				for _, pid := range pids[:len(pids)-1] {
					ok = ok && killed[pid]
				}
			}
			if !ok {
				tl.unexplained = append(tl.unexplained, id+" completed by "+fmtPIDs(pids))
			}
		}
	}
	return tl
}

func fmtPIDs(pids []int) string {
	s := make([]string, len(pids))
	for i, p := range pids {
		s[i] = strconv.Itoa(p)
	}
	return strings.Join(s, ",")
}
