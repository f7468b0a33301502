package health

import (
	"encoding/json"
	"time"
)

// Event types (docs/design.md §8).
const (
	EventSnapshot = "snapshot"
	EventWorker   = "worker_update"
	EventQueue    = "queue_update"
	EventJob      = "job_update"
	EventHost     = "host_update"
	EventHealth   = "health_update"
	EventAction   = "action"
	EventReset    = "reset"
)

// MaxEventsDefault bounds the event stream (XADD MAXLEN ~).
const MaxEventsDefault = 10_000

// Event is one entry of the vigil:events stream, and one SSE message.
type Event struct {
	Topic     string `json:"topic"`
	Type      string `json:"type"`
	Timestamp int64  `json:"timestamp"` // Unix ms
	// Exactly one payload is set, by topic.
	Worker *WorkerView     `json:"worker,omitempty"`
	Action *ActionView     `json:"action,omitempty"`
	Data   json.RawMessage `json:"data,omitempty"` // queue, job, host and health payloads
}

// ActionView records an operator action.
type ActionView struct {
	Action string `json:"action"`
	Target string `json:"target"`
	Result string `json:"result,omitempty"`
}

// WorkerView is a component as the API and events show it (the seed's
// worker_update shape, extended).
type WorkerView struct {
	Component        string  `json:"component"`
	ID               int     `json:"id"`
	QueueType        string  `json:"queue_type"`
	Status           string  `json:"status"`
	Reason           string  `json:"reason,omitempty"`
	Held             bool    `json:"held"`
	Host             string  `json:"host,omitempty"`
	PID              int     `json:"pid,omitempty"`
	CurrentJob       string  `json:"current_job,omitempty"`
	CurrentSeq       int64   `json:"current_seq,omitempty"`
	Rev              int64   `json:"rev,omitempty"`
	ExitCode         *int    `json:"exit_code,omitempty"`
	Signal           string  `json:"signal,omitempty"`
	RestartCount     int     `json:"restart_count"`
	LifetimeRestarts int     `json:"lifetime_restarts"`
	StartedAt        int64   `json:"started_at,omitempty"`
	LastHeartbeat    int64   `json:"last_heartbeat,omitempty"`
	HealthySince     int64   `json:"healthy_since,omitempty"`
	UpdatedAt        int64   `json:"updated_at,omitempty"`
	FailedAt         int64   `json:"failed_at,omitempty"`
	FailureReason    string  `json:"failure_reason,omitempty"`
	LastRestart      int64   `json:"last_restart,omitempty"`
	RecentCrashes    []int64 `json:"recent_crashes,omitempty"`
	RecoveringUntil  int64   `json:"recovering_until,omitempty"`
	CreatedAt        int64   `json:"created_at,omitempty"`
	Version          string  `json:"version,omitempty"`
	// Stats are the worker's counters (its wstats hash; the admin API's
	// GET of one worker fills them in).
	Stats map[string]int64 `json:"stats,omitempty"`
	// An operator's pause of this worker (WorkerPause; the admin API fills
	// these in, the supervisor's events leave them out).
	Paused      bool   `json:"paused,omitempty"`
	PausedBy    string `json:"paused_by,omitempty"`
	PausedAt    int64  `json:"paused_at,omitempty"`
	PauseReason string `json:"pause_reason,omitempty"`
}

func unixMS(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

// View returns the API/event shape of c.
func (c Component) View() WorkerView {
	v := WorkerView{
		Component:        c.ID.String(),
		ID:               c.ID.Slot,
		QueueType:        c.ID.Queue,
		Status:           string(c.Status),
		Reason:           c.Reason,
		Held:             c.Held,
		Host:             c.Host,
		PID:              c.PID,
		CurrentJob:       c.CurrentJob,
		CurrentSeq:       c.CurrentSeq,
		Rev:              c.Rev,
		Signal:           c.Signal,
		RestartCount:     c.Restarts.RestartCount,
		LifetimeRestarts: c.Restarts.LifetimeRestarts,
		StartedAt:        unixMS(c.StartedAt),
		LastHeartbeat:    unixMS(c.LastHeartbeat),
		HealthySince:     unixMS(c.HealthySince),
		UpdatedAt:        unixMS(c.UpdatedAt),
		FailedAt:         unixMS(c.Restarts.FailedAt),
		FailureReason:    c.Restarts.FailureReason,
		CreatedAt:        unixMS(c.CreatedAt),
		Version:          c.Version,
	}
	if c.Status == StatusRecovering {
		v.RecoveringUntil = unixMS(c.RecoveringUntil)
	}
	if c.HasExit {
		code := c.ExitCode
		v.ExitCode = &code
	}
	v.LastRestart = unixMS(c.Restarts.LastRestart)
	for _, t := range c.Restarts.Crashes {
		v.RecentCrashes = append(v.RecentCrashes, t.UnixMilli())
	}
	return v
}

// WorkerEvent is the worker_update event for c at t.
func WorkerEvent(c Component, t time.Time) Event {
	v := c.View()
	return Event{Topic: c.ID.Topic(), Type: EventWorker, Timestamp: t.UnixMilli(), Worker: &v}
}
