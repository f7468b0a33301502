package queue_test

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/internal/clock"
	"github.com/vigil-dev/vigil/queue"
)

// mkScratch makes a kept scratch directory of task id, started at t, with
// n bytes.
func mkScratch(t *testing.T, root, q, id string, started time.Time, n int) string {
	t.Helper()
	dir := filepath.Join(root, q, id+"-"+strconv.FormatInt(started.UnixMilli(), 10))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "f"), make([]byte, n), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

func exists(p string) bool { _, err := os.Stat(p); return err == nil }

// The janitor removes kept scratch directories older than the age bound,
// then the oldest while the host's total is over the byte bound; a
// directory whose task may still run (younger than its pool's task
// timeout) stays whatever the bounds; files it does not know stay.
func TestScratchJanitor(t *testing.T) {
	root := t.TempDir()
	now := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	day := 24 * time.Hour
	ancient := mkScratch(t, root, "a", "t1", now.Add(-8*day), 100)
	old := mkScratch(t, root, "a", "t2", now.Add(-3*day), 1000)
	mid := mkScratch(t, root, "b", "t3", now.Add(-2*day), 1000)
	recent := mkScratch(t, root, "b", "t4", now.Add(-time.Hour), 1000)
	running := mkScratch(t, root, "a", "t5", now.Add(-time.Minute), 5000)
	foreign := filepath.Join(root, "a", "not-ours")
	if err := os.MkdirAll(foreign, 0o700); err != nil {
		t.Fatal(err)
	}
	var dirs int
	var bytes int64
	j := queue.NewScratchJanitor(queue.JanitorConfig{
		Roots:    map[string][]string{root: {"a", "b"}},
		MaxAge:   7 * day,
		MaxBytes: 6500,
		MinAge:   map[string]time.Duration{"a": 10 * time.Minute, "b": 10 * time.Minute},
		Clock:    clock.NewFake(now),
		Removed:  func(n int, b int64) { dirs, bytes = dirs+n, bytes+b },
	})
	removed, err := j.Sweep()
	if err != nil {
		t.Fatal(err)
	}
	// ancient by age (100); then 8,100 − 100 = 8,000 > 6,500: old (1,000)
	// and mid (1,000) go, oldest first; 6,000 left. running is spared.
	for _, p := range []string{ancient, old, mid} {
		if exists(p) {
			t.Errorf("%s kept", p)
		}
	}
	for _, p := range []string{recent, running, foreign} {
		if !exists(p) {
			t.Errorf("%s removed", p)
		}
	}
	if len(removed) != 3 || dirs != 3 || bytes != 2100 || removed[0].Task != "t1" || removed[0].Queue != "a" {
		t.Errorf("removed %+v; counted %d dirs, %d bytes", removed, dirs, bytes)
	}
	// Nothing more to do.
	if again, err := j.Sweep(); err != nil || len(again) != 0 {
		t.Errorf("second sweep: %v %v", again, err)
	}
	list, err := queue.ListScratch(map[string][]string{root: {"a", "b"}})
	if err != nil || len(list) != 2 || list[0].Task != "t4" || list[1].Bytes != 5000 {
		t.Errorf("list %+v %v", list, err)
	}
}
