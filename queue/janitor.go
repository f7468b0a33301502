package queue

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/vigil-dev/vigil/internal/clock"
)

// Defaults of JanitorConfig.
const (
	ScratchMaxAgeDefault = 7 * 24 * time.Hour
	JanitorEveryDefault  = 10 * time.Minute
)

// ScratchRootDefault is where a worker keeps scratch directories when its
// pool names none (VIGIL_SCRATCH_DIR).
func ScratchRootDefault() string { return filepath.Join(os.TempDir(), "vigil-scratch") }

// ScratchDirInfo is one task's scratch directory on this host.
type ScratchDirInfo struct {
	Path    string    `json:"path"`
	Queue   string    `json:"queue"`
	Task    string    `json:"task"`    // the task id as its directory name writes it
	Started time.Time `json:"started"` // when the run that made it began
	Bytes   int64     `json:"bytes"`
	Files   int       `json:"files"`
}

// JanitorConfig configures a ScratchJanitor.
type JanitorConfig struct {
	// Roots are the scratch roots to look in, each with the queues whose
	// directories are there (root/<queue>/<task>-<start ms>).
	Roots map[string][]string
	// MaxAge removes directories older than that (ScratchMaxAgeDefault;
	// negative: never by age).
	MaxAge time.Duration
	// MaxBytes bounds the directories' total on this host: the oldest go
	// first (0: no bound).
	MaxBytes int64
	// MinAge spares a directory younger than that whatever the bounds:
	// its task may still run (the longest task timeout of its pool).
	MinAge  map[string]time.Duration // by queue
	Every   time.Duration            // JanitorEveryDefault
	Clock   clock.Clock
	Logger  *slog.Logger
	Removed func(dirs int, bytes int64) // metrics, after each sweep that removed some
}

// ScratchJanitor removes kept scratch directories past their age or past
// the host's byte bound, oldest first.
type ScratchJanitor struct {
	cfg JanitorConfig
}

// NewScratchJanitor returns a janitor; Run sweeps until its context ends.
func NewScratchJanitor(cfg JanitorConfig) *ScratchJanitor {
	cfg.MaxAge = cmp.Or(cfg.MaxAge, ScratchMaxAgeDefault)
	cfg.Every = cmp.Or(cfg.Every, JanitorEveryDefault)
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &ScratchJanitor{cfg: cfg}
}

// ListScratch returns the scratch directories under the roots, oldest
// first.
func ListScratch(roots map[string][]string) ([]ScratchDirInfo, error) {
	var out []ScratchDirInfo
	var errs []error
	for root, queues := range roots {
		for _, q := range queues {
			entries, err := os.ReadDir(filepath.Join(root, q))
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			if err != nil {
				errs = append(errs, err)
				continue
			}
			for _, de := range entries {
				if !de.IsDir() {
					continue
				}
				task, started, ok := parseScratchName(de.Name())
				if !ok {
					continue // not one of ours
				}
				path := filepath.Join(root, q, de.Name())
				bytes, files := dirSize(path)
				out = append(out, ScratchDirInfo{Path: path, Queue: q, Task: task, Started: started, Bytes: bytes, Files: files})
			}
		}
	}
	slices.SortFunc(out, func(a, b ScratchDirInfo) int {
		return cmp.Or(a.Started.Compare(b.Started), strings.Compare(a.Path, b.Path))
	})
	return out, errors.Join(errs...)
}

// parseScratchName reads "<task>-<start ms>" (ScratchDir's naming).
func parseScratchName(name string) (task string, started time.Time, ok bool) {
	i := strings.LastIndexByte(name, '-')
	if i <= 0 {
		return "", time.Time{}, false
	}
	ms, err := strconv.ParseInt(name[i+1:], 10, 64)
	if err != nil || ms <= 0 {
		return "", time.Time{}, false
	}
	return name[:i], time.UnixMilli(ms), true
}

// Sweep removes what the bounds say, once, and returns what it removed.
func (j *ScratchJanitor) Sweep() ([]ScratchDirInfo, error) {
	dirs, err := ListScratch(j.cfg.Roots)
	now := j.cfg.Clock.Now()
	var total int64
	for _, d := range dirs {
		total += d.Bytes
	}
	var removed []ScratchDirInfo
	for _, d := range dirs { // oldest first
		age := now.Sub(d.Started)
		if age < j.cfg.MinAge[d.Queue] {
			continue
		}
		tooOld := j.cfg.MaxAge > 0 && age > j.cfg.MaxAge
		tooMuch := j.cfg.MaxBytes > 0 && total > j.cfg.MaxBytes
		if !tooOld && !tooMuch {
			continue
		}
		if rerr := os.RemoveAll(d.Path); rerr != nil {
			err = errors.Join(err, rerr)
			continue
		}
		total -= d.Bytes
		removed = append(removed, d)
		reason := "older than scratch_max_age"
		if !tooOld {
			reason = "over scratch_max_bytes"
		}
		j.cfg.Logger.Info("kept scratch dir removed", "task", d.Task, "queue", d.Queue, "dir", d.Path, "bytes", d.Bytes,
			"age", age.Round(time.Second), "reason", reason)
	}
	if len(removed) > 0 && j.cfg.Removed != nil {
		var b int64
		for _, d := range removed {
			b += d.Bytes
		}
		j.cfg.Removed(len(removed), b)
	}
	return removed, err
}

// Run sweeps now and every Every until ctx ends.
func (j *ScratchJanitor) Run(ctx context.Context) {
	for {
		if _, err := j.Sweep(); err != nil {
			j.cfg.Logger.Warn("scratch janitor", "err", err)
		}
		next := make(chan struct{})
		t := j.cfg.Clock.AfterFunc(j.cfg.Every, func() { close(next) })
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-next:
		}
	}
}
