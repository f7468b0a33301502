package queue

import (
	"context"
	"encoding/json"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/vigil-dev/vigil/health"
)

// JobState is the state a job event announces (docs/design.md §6). A job's
// events come in the order created → processing → progress* → done |
// error (stage events, named milestones a handler reports, among the
// progress ones); a recovered job has requeued:stale before its next processing,
// and a job cut short by a worker's shutdown has aborted:shutdown.
type JobState string

// Job states.
const (
	StateCreated    JobState = "created"
	StateProcessing JobState = "processing"
	StateProgress   JobState = "progress"
	// StateStage: the handler reached a named milestone (Stage).
	StateStage         JobState = "stage"
	StateDone          JobState = "done"
	StateError         JobState = "error"
	StateRequeuedStale JobState = "requeued:stale"
	// StateRequeuedStranded: a dequeue's reply was lost and the worker,
	// which never ran the task, put it back (no attempt counted).
	StateRequeuedStranded JobState = "requeued:stranded"
	StateAbortedShutdown  JobState = "aborted:shutdown"
	// StateStuck: the handler did not return once its context ended (its
	// deadline, a cancel): the task stays active under its worker, which
	// exits once its other tasks are done; requeued:stale follows.
	StateStuck JobState = "stuck"
	StateToxic JobState = "toxic"
)

// TopicJobs is the topic that carries every job's events, besides the
// job's own topic (JobTopic): the job's entries in the stream name it as
// their also topic (health.EntryAlso).
const TopicJobs = "queue:jobs"

// JobTopic is the topic of one job's events: job:<queue>:<task id>.
func JobTopic(q, id string) string { return "job:" + q + ":" + id }

// Failure codes of error events, also the prefix of the archived task's
// LastErr.
const (
	CodeRetriesExhausted = "RETRIES_EXHAUSTED"
	CodeNonRetryable     = "NON_RETRYABLE"
	CodeNoHandler        = "NO_HANDLER"
	CodeRevoked          = "REVOKED"
	CodeNotEnqueued      = "NOT_ENQUEUED" // the created event of a task asynq then refused
)

// JobEvent is the payload (Event.Data) of a job_update event.
type JobEvent struct {
	Queue string   `json:"queue"`
	ID    string   `json:"id"`
	Type  string   `json:"task_type,omitempty"`
	State JobState `json:"state"`
	// Retried and MaxRetry are asynq's counts of handler failures.
	Retried  int `json:"retried"`
	MaxRetry int `json:"max_retry"`
	// Progress is set on progress events (percent, 0–100).
	Progress *float64 `json:"progress,omitempty"`
	// Stage is set on stage events: the milestone's name.
	Stage string `json:"stage,omitempty"`
	// Error and Code describe a failure; Final says no attempt follows
	// (the task is archived, or dropped when revoked).
	Error string `json:"error,omitempty"`
	Code  string `json:"code,omitempty"`
	Final bool   `json:"final,omitempty"`
	// DurationMS is how long the handler ran (done, error, aborted).
	DurationMS int64 `json:"duration_ms,omitempty"`
	// ShortCircuit marks a done task that did not run: every output its
	// type declares was published by an earlier run.
	ShortCircuit bool `json:"short_circuit,omitempty"`
	// ScratchDir and ScratchBytes name the task's scratch directory kept
	// on this worker's host after a failure (the janitor bounds them).
	ScratchDir   string `json:"scratch_dir,omitempty"`
	ScratchBytes int64  `json:"scratch_bytes,omitempty"`
	// Crashes is how many workers died running the task.
	Crashes   int    `json:"crashes,omitempty"`
	Component string `json:"component,omitempty"`
	PID       int    `json:"pid,omitempty"`
	// ProcessAt is when a created task becomes due (Unix ms).
	ProcessAt int64 `json:"process_at,omitempty"`
	// WorkerJob and WorkerSeq are set (WorkerSeq > 0) on the event of a
	// start or end that changed its worker's current_job: the worker's
	// current job after it ("" idle) and the change's number within the
	// worker's process (its record's current_seq). The event broker turns
	// them into the worker's worker_update.
	WorkerJob string `json:"worker_job,omitempty" doc:"With worker_seq: this start or end changed its worker's current_job to this task (empty: idle)"`
	WorkerSeq int64  `json:"worker_seq,omitempty" doc:"The number of that change within the worker's process (its record's current_seq); the event stream sends the worker's worker_update right after"`
}

// jobEvents queues e, at t, on pipe: one stream entry under the job's
// topic that is also queue:jobs's (health.EntryAlso), which readers of the
// stream deliver under both topics. The payload is encoded once and the
// envelope built around it (as json.Marshal of the health.Event would,
// without encoding and compacting the payload again: a worker's CPU per
// task).
func jobEvents(ctx context.Context, store *health.Store, pipe redis.Pipeliner, t time.Time, e JobEvent) {
	data, _ := json.Marshal(e) // plain struct: cannot fail
	topic := JobTopic(e.Queue, e.ID)
	store.AddEncodedEventTo(ctx, pipe, topic, TopicJobs, health.EventJob, jobEnvelope(topic, t.UnixMilli(), data))
}

// jobEnvelope is json.Marshal(health.Event{Topic: topic, Type: job_update,
// Timestamp: ms, Data: data}) for data a compact JSON object.
func jobEnvelope(topic string, ms int64, data []byte) string {
	t, _ := json.Marshal(topic) // a string: cannot fail
	b := make([]byte, 0, len(t)+len(data)+64)
	b = append(b, `{"topic":`...)
	b = append(b, t...)
	b = append(b, `,"type":"`+health.EventJob+`","timestamp":`...)
	b = strconv.AppendInt(b, ms, 10)
	b = append(b, `,"data":`...)
	b = append(b, data...)
	b = append(b, '}')
	return string(b)
}

// DecodeJobEvent reads the payload of a job_update event.
func DecodeJobEvent(e health.Event) (JobEvent, error) {
	var je JobEvent
	err := json.Unmarshal(e.Data, &je)
	return je, err
}
