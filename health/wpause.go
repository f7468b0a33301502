package health

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// WorkerPause is an operator's pause of one worker (queue.RunWorker takes
// no task while it holds; it keeps beating and finishes what it runs).
type WorkerPause struct {
	At     time.Time
	By     string
	Reason string
}

func (p WorkerPause) value() string {
	clean := func(s string) string { return strings.ReplaceAll(s, "\t", " ") }
	return strconv.FormatInt(p.At.UnixMilli(), 10) + "\t" + clean(p.By) + "\t" + clean(p.Reason)
}

func parseWorkerPause(v string) WorkerPause {
	parts := strings.SplitN(v, "\t", 3)
	for len(parts) < 3 {
		parts = append(parts, "")
	}
	ms, _ := strconv.ParseInt(parts[0], 10, 64)
	return WorkerPause{At: time.UnixMilli(ms), By: parts[1], Reason: parts[2]}
}

// PauseWorker pauses c's worker; it reports false when it was paused
// already (the first pause's who and why stay).
func (s *Store) PauseWorker(ctx context.Context, c ComponentID, p WorkerPause) (bool, error) {
	return s.rdb.SetNX(ctx, s.keys.WorkerPause(c), p.value(), 0).Result()
}

// ResumeWorker lifts c's pause; it reports false when there was none.
func (s *Store) ResumeWorker(ctx context.Context, c ComponentID) (bool, error) {
	n, err := s.rdb.Del(ctx, s.keys.WorkerPause(c)).Result()
	return n > 0, err
}

// WorkerPauses returns the pauses of the components ids that have one,
// in one round trip (a pipeline: the keys are in different slots).
func (s *Store) WorkerPauses(ctx context.Context, ids []ComponentID) (map[ComponentID]WorkerPause, error) {
	out := map[ComponentID]WorkerPause{}
	if len(ids) == 0 {
		return out, nil
	}
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.StringCmd, len(ids))
	for i, id := range ids {
		cmds[i] = pipe.Get(ctx, s.keys.WorkerPause(id))
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	for i, cmd := range cmds {
		if v, err := cmd.Result(); err == nil {
			out[ids[i]] = parseWorkerPause(v)
		}
	}
	return out, nil
}
