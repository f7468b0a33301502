package testledger

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Reader reads a ledger.
type Reader struct {
	rdb    redis.UniversalClient
	prefix string
}

// NewReader reads the ledger at prefix in rdb.
func NewReader(rdb redis.UniversalClient, prefix string) *Reader {
	return &Reader{rdb: rdb, prefix: prefix}
}

// Prefix is the ledger's key prefix.
func (l *Reader) Prefix() string { return l.prefix }

// Hash reads one hash of the ledger by name (runs, completions, …).
func (l *Reader) Hash(ctx context.Context, name string) (map[string]string, error) {
	h, err := l.rdb.HGetAll(ctx, l.prefix+name).Result()
	if err != nil {
		return nil, fmt.Errorf("read ledger %s: %w", name, err)
	}
	return h, nil
}

// Counts reads a hash of counters.
func (l *Reader) Counts(ctx context.Context, name string) (map[string]int, error) {
	h, err := l.Hash(ctx, name)
	out := make(map[string]int, len(h))
	for k, v := range h {
		out[k], _ = strconv.Atoi(v)
	}
	return out, err
}

// PIDLists reads a hash of comma-separated pids (completers, runners).
func (l *Reader) PIDLists(ctx context.Context, name string) (map[string][]int, error) {
	h, err := l.Hash(ctx, name)
	out := make(map[string][]int, len(h))
	for k, v := range h {
		for _, f := range strings.Split(v, ",") {
			pid, _ := strconv.Atoi(f)
			out[k] = append(out[k], pid)
		}
	}
	return out, err
}

// DoneBetween returns the tasks that first completed between from and to.
func (l *Reader) DoneBetween(ctx context.Context, from, to time.Time) (map[string]bool, error) {
	h, err := l.Hash(ctx, "first_done")
	out := map[string]bool{}
	for k, v := range h {
		ms, _ := strconv.ParseInt(v, 10, 64)
		if at := time.UnixMilli(ms); !at.Before(from) && !at.After(to) {
			out[k] = true
		}
	}
	return out, err
}

// Done is how many distinct tasks completed at least once.
func (l *Reader) Done(ctx context.Context) (int, error) {
	n, err := l.rdb.HLen(ctx, l.prefix+"completions").Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return 0, fmt.Errorf("read ledger: %w", err)
	}
	return int(n), nil
}

// Violations lists handlers that started inside a task another live
// process's handler was still in.
func (l *Reader) Violations(ctx context.Context) ([]string, error) {
	v, err := l.rdb.LRange(ctx, l.prefix+"violations", 0, -1).Result()
	if err != nil {
		return nil, fmt.Errorf("read ledger violations: %w", err)
	}
	return v, nil
}

// Tally is what a run measured about its jobs.
type Tally struct {
	Jobs, Lost, Duplicated int
	Unexplained            []string // repeated completions not explained by a killed process
}

// Judge counts, for the tasks ids, those never completed (lost) and those
// completed more than once (duplicated), from completions (task → count)
// and completers (task → pids). A repeated completion is explained only
// when every completion but the last was made by a process in killed (it
// finished the handler and died before asynq recorded it: delivery is at
// least once), or by a task in excused (the caller says why).
func Judge(ids []string, completions map[string]int, completers map[string][]int, killed map[int]bool, excused map[string]bool) Tally {
	tl := Tally{Jobs: len(ids)}
	for _, id := range ids {
		switch n := completions[id]; {
		case n == 0:
			tl.Lost++
		case n > 1:
			tl.Duplicated++
			pids := completers[id]
			ok := excused[id]
			if !ok {
				ok = true
				for _, pid := range pids[:len(pids)-1] {
					ok = ok && killed[pid]
				}
			}
			if !ok {
				tl.Unexplained = append(tl.Unexplained, id+" completed by "+FormatPIDs(pids))
			}
		}
	}
	return tl
}

// FormatPIDs joins pids with commas.
func FormatPIDs(pids []int) string {
	s := make([]string, len(pids))
	for i, p := range pids {
		s[i] = strconv.Itoa(p)
	}
	return strings.Join(s, ",")
}
