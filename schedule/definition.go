package schedule

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"
)

// CatchUp is what a leader does with the ticks it finds missed (a later
// tick is also due, or the tick is more than Settings.MisfireGrace late):
// after a leader was killed, drained or cut off, or Redis was away.
type CatchUp string

// Catch-up policies.
const (
	// CatchUpNone skips every missed tick; only a tick within the grace
	// fires.
	CatchUpNone CatchUp = "none"
	// CatchUpLast fires the latest due tick once and skips the earlier
	// ones (the default).
	CatchUpLast CatchUp = "last"
	// CatchUpAll fires every missed tick, oldest first (at most
	// Settings.MaxCatchUp of the most recent; the older are skipped).
	CatchUpAll CatchUp = "all"
)

// CatchUpDefault is a schedule's policy when none is given.
const CatchUpDefault = CatchUpLast

// Sources of a schedule.
const (
	SourceConfig = "config" // from a host's configuration file
	SourceAPI    = "api"    // created through the admin API
)

// Definition is what an operator writes of a schedule: when, and the task
// to enqueue each time.
type Definition struct {
	Name  string `json:"name"`
	Spec  string `json:"spec"`
	Queue string `json:"queue"`
	Type  string `json:"type"`
	// Payload is the task's payload: a JSON value, handed to the handler
	// as its bytes (empty: none).
	Payload json.RawMessage `json:"payload,omitempty"`
	// asynq options of each task: MaxRetry nil is asynq's default (25);
	// Timeout 0 the pool's task_timeout; Retention 0 none; Unique 0 none
	// (else a tick whose previous task of the same type and payload is
	// still pending or running is recorded but enqueues nothing).
	MaxRetry  *int          `json:"max_retry,omitempty"`
	Timeout   time.Duration `json:"timeout,omitempty"`
	Retention time.Duration `json:"retention,omitempty"`
	Unique    time.Duration `json:"unique,omitempty"`
	CatchUp   CatchUp       `json:"catch_up,omitempty"`
	Source    string        `json:"source,omitempty"`
}

// Limits of a definition.
const (
	MaxTypeLen     = 200
	MaxRetryLimit  = 1000
	MaxOptDuration = 7 * 24 * time.Hour
)

var (
	namePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)
	typePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.:/-]*$`)
)

// Errors of the store; a *FieldError wraps ErrInvalid or ErrExists.
var (
	ErrInvalid      = errors.New("invalid schedule")
	ErrExists       = errors.New("schedule exists")
	ErrNotFound     = errors.New("no such schedule")
	ErrUnknownQueue = errors.New("unknown queue")
)

// FieldError is a refusal of one field of a definition.
type FieldError struct {
	Field string // "spec", "queue", "payload", …
	Value any
	Err   error // wraps ErrInvalid, ErrExists or ErrUnknownQueue
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Err.Error() }
func (e *FieldError) Unwrap() error { return e.Err }

func invalid(field string, value any, format string, args ...any) *FieldError {
	return &FieldError{Field: field, Value: value, Err: fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)}
}

// Rules are what a definition is checked against.
type Rules struct {
	// Queues are the queues a schedule may name (the pools' queues).
	Queues []string
	// MaxPayload bounds the payload in bytes.
	MaxPayload int
	// AllowSubsecond lets "@every" go below a second.
	AllowSubsecond bool
	// Now is the time a spec must still tick after.
	Now time.Time
}

// Check fills in the defaults of d and checks it; the error is a
// *FieldError naming the first bad field.
func (d *Definition) Check(r Rules) error {
	if d.CatchUp == "" {
		d.CatchUp = CatchUpDefault
	}
	if d.Source == "" {
		d.Source = SourceAPI
	}
	if string(d.Payload) == "null" {
		d.Payload = nil
	}
	switch {
	case !namePattern.MatchString(d.Name):
		return invalid("name", trunc(d.Name), "%q must match %s", trunc(d.Name), namePattern)
	case len(d.Type) > MaxTypeLen || !typePattern.MatchString(d.Type):
		return invalid("type", trunc(d.Type), "%q must be 1 to %d characters matching %s", trunc(d.Type), MaxTypeLen, typePattern)
	case !namePattern.MatchString(d.Queue):
		return invalid("queue", trunc(d.Queue), "%q must match %s", trunc(d.Queue), namePattern)
	case r.Queues != nil && !slices.Contains(r.Queues, d.Queue):
		return &FieldError{Field: "queue", Value: d.Queue, Err: fmt.Errorf("%w %q: no pool consumes it", ErrUnknownQueue, d.Queue)}
	case r.MaxPayload > 0 && len(d.Payload) > r.MaxPayload:
		return invalid("payload", len(d.Payload), "%d bytes, over the limit of %d", len(d.Payload), r.MaxPayload)
	case len(d.Payload) > 0 && !json.Valid(d.Payload):
		return invalid("payload", nil, "not JSON")
	case d.MaxRetry != nil && (*d.MaxRetry < 0 || *d.MaxRetry > MaxRetryLimit):
		return invalid("max_retry", *d.MaxRetry, "must be from 0 to %d", MaxRetryLimit)
	case d.Timeout < 0 || d.Timeout > MaxOptDuration:
		return invalid("timeout", d.Timeout.String(), "must be from 0 to %s", MaxOptDuration)
	case d.Retention < 0 || d.Retention > MaxOptDuration:
		return invalid("retention", d.Retention.String(), "must be from 0 to %s", MaxOptDuration)
	case d.Unique < 0 || d.Unique > MaxOptDuration || (d.Unique > 0 && d.Unique < time.Second):
		return invalid("unique", d.Unique.String(), "must be 0 or from 1s to %s", MaxOptDuration)
	case d.Timeout%time.Second != 0 || d.Retention%time.Second != 0 || d.Unique%time.Second != 0:
		return invalid("timeout", d.Timeout.String(), "timeout, retention and unique are whole seconds (asynq keeps seconds)")
	case d.CatchUp != CatchUpNone && d.CatchUp != CatchUpLast && d.CatchUp != CatchUpAll:
		return invalid("catch_up", trunc(string(d.CatchUp)), "%q must be none, last or all", trunc(string(d.CatchUp)))
	case d.Source != SourceAPI && d.Source != SourceConfig:
		return invalid("source", trunc(d.Source), "must be api or config")
	}
	spec, err := ParseSpec(d.Spec, r.AllowSubsecond)
	if err != nil {
		return invalid("spec", trunc(d.Spec), "%q: %v", trunc(d.Spec), err)
	}
	if !r.Now.IsZero() && spec.Next(r.Now).IsZero() {
		return invalid("spec", trunc(d.Spec), "%q never ticks", trunc(d.Spec))
	}
	return nil
}

// same reports whether d and o define the same schedule.
func (d Definition) same(o Definition) bool {
	a, _ := json.Marshal(d)
	b, _ := json.Marshal(o)
	return string(a) == string(b)
}

func trunc(s string) string {
	if len(s) <= 80 {
		return s
	}
	return strings.ToValidUTF8(s[:80], "") + "…"
}
