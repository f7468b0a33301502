package queue

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/vigil-dev/vigil/health"
)

// RunningTask is an entry of a worker's running hash (docs/design.md §3):
// stored as "<pid>:<start ms>" under the task id, so that the entries of a
// dead process are told apart from those of its replacement.
type RunningTask struct {
	ID      string    `json:"id"`
	PID     int       `json:"pid"`
	Started time.Time `json:"started"`
}

func runningValue(pid int, start time.Time) string {
	return strconv.Itoa(pid) + ":" + strconv.FormatInt(start.UnixMilli(), 10)
}

func parseRunning(id, v string) (RunningTask, bool) {
	p, s, ok := strings.Cut(v, ":")
	pid, err1 := strconv.Atoi(p)
	ms, err2 := strconv.ParseInt(s, 10, 64)
	if !ok || err1 != nil || err2 != nil {
		return RunningTask{}, false
	}
	return RunningTask{ID: id, PID: pid, Started: time.UnixMilli(ms)}, true
}

// Running lists the tasks component c runs now, as its worker recorded
// them (entries of a dead process stay until it is recovered).
func Running(ctx context.Context, store *health.Store, c health.ComponentID) ([]RunningTask, error) {
	h, err := store.Client().HGetAll(ctx, store.Keys().Running(c)).Result()
	if err != nil {
		return nil, fmt.Errorf("read running tasks of %s: %w", c, err)
	}
	out := make([]RunningTask, 0, len(h))
	for id, v := range h {
		if r, ok := parseRunning(id, v); ok {
			out = append(out, r)
		}
	}
	return out, nil
}
