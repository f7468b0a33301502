package health

import (
	"strconv"
	"time"

	"github.com/vigil-dev/vigil/policy"
)

// Fields of the component hash (docs/design.md §3).
const (
	FieldStatus        = "status"
	FieldReason        = "reason"
	FieldHeld          = "held"
	FieldHost          = "host"
	FieldInstance      = "instance"
	FieldPID           = "pid"
	FieldQueue         = "queue"
	FieldSlot          = "slot"
	FieldStartedAt     = "started_at"
	FieldLastHeartbeat = "last_heartbeat"
	FieldHealthySince  = "healthy_since"
	FieldExitCode      = "exit_code"
	FieldSignal        = "signal"
	FieldUpdatedAt     = "updated_at"
	FieldCurrentJob    = "current_job"
	// FieldCurrentSeq numbers the worker's changes of current_job within
	// its process (1, 2, …), written with it: the higher is the newer.
	FieldCurrentSeq = "current_seq"
	// FieldRev is the record's revision: every write of the record but a
	// worker's current_job sets it to max(rev+1, Redis's TIME in µs), in
	// the script that writes the record. A view with a lower rev is older,
	// even across a record re-created after Redis lost it (Redis's clock:
	// not the writers', which may be behind or stamp an old record).
	FieldRev = "rev"
	// FieldRecoveringUntil is when a recovering window ends (Unix ms),
	// written by the heartbeat script with the status recovering.
	FieldRecoveringUntil = "recovering_until"
	// FieldCreatedAt is the first registration (Unix ms), set once.
	FieldCreatedAt = "created_at"
	// FieldVersion is the version the worker process reports in its
	// heartbeat (VIGIL_VERSION, or its binary's build info).
	FieldVersion = "version"
)

// Fields of the restart-history hash.
const (
	FieldRestartCount     = "restart_count"
	FieldLifetimeRestarts = "lifetime_restarts"
	FieldLastRestart      = "last_restart"
	FieldFailedAt         = "failed_at"
	FieldFailureReason    = "failure_reason"
)

// Component is one component's record joined with its restart history.
type Component struct {
	ID            ComponentID
	Status        Status
	Reason        string
	Held          bool
	Host          string
	Instance      string
	PID           int
	StartedAt     time.Time
	LastHeartbeat time.Time
	HealthySince  time.Time
	// ExitCode is the last exit's code; HasExit says whether there was one.
	ExitCode   int
	HasExit    bool
	Signal     string
	UpdatedAt  time.Time
	CurrentJob string
	// CurrentSeq numbers CurrentJob's changes within the process (the
	// higher is the newer); Rev is the record's revision (FieldRev).
	CurrentSeq int64
	Rev        int64
	// RecoveringUntil is when the window of a recovering worker ends.
	RecoveringUntil time.Time
	CreatedAt       time.Time // first registration
	Version         string    // the worker's, from its heartbeat
	Restarts        policy.State
}

// ms formats t as Unix milliseconds ("" for the zero time).
func ms(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return strconv.FormatInt(t.UnixMilli(), 10)
}

func parseMS(s string) time.Time {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 {
		return time.Time{}
	}
	return time.UnixMilli(n)
}

// componentFromHash builds a Component from the two hashes and the crash
// window's scores (ms).
func componentFromHash(id ComponentID, h, r map[string]string, crashes []float64) Component {
	c := Component{
		ID:              id,
		Status:          Status(h[FieldStatus]),
		Reason:          h[FieldReason],
		Held:            h[FieldHeld] == "1",
		Host:            h[FieldHost],
		Instance:        h[FieldInstance],
		StartedAt:       parseMS(h[FieldStartedAt]),
		LastHeartbeat:   parseMS(h[FieldLastHeartbeat]),
		HealthySince:    parseMS(h[FieldHealthySince]),
		Signal:          h[FieldSignal],
		UpdatedAt:       parseMS(h[FieldUpdatedAt]),
		CurrentJob:      h[FieldCurrentJob],
		RecoveringUntil: parseMS(h[FieldRecoveringUntil]),
		CreatedAt:       parseMS(h[FieldCreatedAt]),
		Version:         h[FieldVersion],
		Restarts:        restartsFromHash(r, crashes),
	}
	c.PID, _ = strconv.Atoi(h[FieldPID])
	c.CurrentSeq, _ = strconv.ParseInt(h[FieldCurrentSeq], 10, 64)
	c.Rev, _ = strconv.ParseInt(h[FieldRev], 10, 64)
	if v, ok := h[FieldExitCode]; ok && v != "" {
		if n, err := strconv.Atoi(v); err == nil {
			c.ExitCode, c.HasExit = n, true
		}
	}
	return c
}

func restartsFromHash(r map[string]string, crashes []float64) policy.State {
	s := policy.State{
		LastRestart:   parseMS(r[FieldLastRestart]),
		FailedAt:      parseMS(r[FieldFailedAt]),
		FailureReason: r[FieldFailureReason],
	}
	s.RestartCount, _ = strconv.Atoi(r[FieldRestartCount])
	s.LifetimeRestarts, _ = strconv.Atoi(r[FieldLifetimeRestarts])
	for _, x := range crashes {
		s.Crashes = append(s.Crashes, time.UnixMilli(int64(x)))
	}
	return s
}

// restartsHash is the restart-history hash for s.
func restartsHash(s policy.State) map[string]string {
	return map[string]string{
		FieldRestartCount:     strconv.Itoa(s.RestartCount),
		FieldLifetimeRestarts: strconv.Itoa(s.LifetimeRestarts),
		FieldLastRestart:      ms(s.LastRestart),
		FieldFailedAt:         ms(s.FailedAt),
		FieldFailureReason:    s.FailureReason,
	}
}
