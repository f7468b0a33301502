package schedule

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// View is a schedule as the API shows it: its definition and its state.
type View struct {
	Definition
	Paused    bool
	Rev       int64
	Since     time.Time // its ticks are those after this (created, resumed, spec changed)
	CreatedAt time.Time
	UpdatedAt time.Time
	// LastTick is the last tick decided (fired or skipped), LastFired the
	// last tick that enqueued a task; LastFiredAt when the last task (of a
	// tick or a trigger) was enqueued, LastTask its id, Tasks the last ids,
	// newest first.
	LastTick    time.Time
	LastFired   time.Time
	LastFiredAt time.Time
	LastTask    string
	Tasks       []string
	Fires       int64
	Skipped     int64
	// Next is the next tick (zero while paused).
	Next time.Time
}

// parseRecord reads a record's fields; ok is false for no record.
func parseRecord(name string, f map[string]string) (v View, ok bool, err error) {
	if len(f) == 0 {
		return View{}, false, nil
	}
	if err := json.Unmarshal([]byte(f[fDef]), &v.Definition); err != nil {
		return View{}, true, fmt.Errorf("schedule %s: its definition in Redis: %w", name, err)
	}
	v.Name = name
	v.Paused = f[fPaused] == "1"
	v.Rev, _ = strconv.ParseInt(f[fRev], 10, 64)
	v.Since, v.CreatedAt, v.UpdatedAt = msTime(f[fSince]), msTime(f[fCreatedAt]), msTime(f[fUpdatedAt])
	v.LastTick, v.LastFired, v.LastFiredAt = msTime(f[fLastTick]), msTime(f[fLastFired]), msTime(f[fLastFiredAt])
	v.LastTask = f[fLastTask]
	if t := f[fTasks]; t != "" {
		v.Tasks = strings.Split(t, ",")
	}
	v.Fires, _ = strconv.ParseInt(f[fFires], 10, 64)
	v.Skipped, _ = strconv.ParseInt(f[fSkipped], 10, 64)
	return v, true, nil
}

// from is where the undecided ticks start: after the last decided tick and
// after Since.
func (v View) from() time.Time {
	if v.LastTick.After(v.Since) {
		return v.LastTick
	}
	return v.Since
}

// withNext fills in Next by spec.
func (v View) withNext(spec Spec, now time.Time) View {
	v.Next = time.Time{}
	if !v.Paused {
		f := v.from()
		if now.After(f) {
			// Ticks due but not yet decided come first.
			if n := spec.Next(f); !n.IsZero() && !n.After(now) {
				v.Next = n
				return v
			}
			f = now
		}
		v.Next = spec.Next(f)
	}
	return v
}

func msTime(s string) time.Time {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 {
		return time.Time{}
	}
	return time.UnixMilli(n)
}

func ms(t time.Time) string {
	if t.IsZero() {
		return "0"
	}
	return strconv.FormatInt(t.UnixMilli(), 10)
}

// tickID is the task id of a schedule's tick: the schedule and the tick's
// instant (UTC, ms), e.g. sched.nightly.20261124T020000.000Z. Names have
// no '.', so the id names one tick of one schedule.
func tickID(name string, tick time.Time) string {
	return "sched." + name + "." + tick.UTC().Format("20060102T150405.000Z")
}

// triggerID is the task id of a trigger (run now) of a schedule.
func triggerID(name string, at time.Time, rnd string) string {
	return "sched." + name + ".manual." + at.UTC().Format("20060102T150405.000Z") + "." + rnd
}

// TickOf returns the schedule and tick a task id names, if it is the id
// of a tick's task.
func TickOf(id string) (name string, tick time.Time, ok bool) {
	rest, found := strings.CutPrefix(id, "sched.")
	if !found {
		return "", time.Time{}, false
	}
	name, at, found := strings.Cut(rest, ".")
	if !found || !namePattern.MatchString(name) {
		return "", time.Time{}, false
	}
	t, err := time.Parse("20060102T150405.000Z", at)
	if err != nil {
		return "", time.Time{}, false
	}
	return name, t, true
}
