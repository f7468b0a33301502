package server

import (
	"cmp"
	"context"
	"net/http"
	"reflect"
	"slices"

	"github.com/danielgtaylor/huma/v2"
	"github.com/danielgtaylor/huma/v2/adapters/humago"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/queue"
	"github.com/vigil-dev/vigil/schedule"
)

// EventsInput is the subscription of GET /api/v1/events.
type EventsInput struct {
	Topic []string `query:"topic,explode" maxItems:"64" example:"worker:*:status" doc:"Topic patterns, repeated (topic=P&topic=Q). Topics: system:health, queue:status, queue:<q>:status, queue:jobs, job:<q>:<task>, worker:<q>:<slot>:status, host:<h>:status. In a pattern * stands for one or more whole segments: worker:*:status is every worker, worker:tag:*:status every worker of tag, queue:*:status every queue (not queue:status). None: every topic."`
	// The header EventSource sends when it reconnects by itself.
	LastEventID string `header:"Last-Event-ID" maxLength:"64" example:"1790000000000-0" doc:"Resume after this event: what was missed is replayed from the stream, or, when it has been trimmed, a reset event and a fresh snapshot follow"`
	// The same for a client that opens a new connection itself.
	LastEventIDQuery string `query:"last_event_id" maxLength:"64" example:"1790000000000-0" doc:"Like the Last-Event-ID header (which wins), for clients that cannot set it"`
}

// Payloads of the event stream, for the spec. Every message's data is a
// JSON object with topic, type, timestamp (Unix ms) and one payload.

// WorkerUpdateEvent is a worker's new state (topic worker:<q>:<slot>:status).
type WorkerUpdateEvent struct {
	Topic     string `json:"topic" example:"worker:tag:0:status"`
	Type      string `json:"type" enum:"worker_update"`
	Timestamp int64  `json:"timestamp" doc:"Unix ms"`
	Worker    Worker `json:"worker"`
}

// WorkerRemovedEvent says a worker beyond its pool was removed for good
// (topic worker:<q>:<slot>:status): its last state and restart history,
// which only the event stream keeps from then on.
type WorkerRemovedEvent struct {
	Topic     string `json:"topic" example:"worker:tag:4:status"`
	Type      string `json:"type" enum:"worker_removed"`
	Timestamp int64  `json:"timestamp" doc:"Unix ms"`
	Worker    Worker `json:"worker"`
}

// QueueUpdateEvent is a queue's statistics (queue:<q>:status), or all
// queues' (queue:status, queue empty), announced by the leader when they
// change.
type QueueUpdateEvent struct {
	Topic     string      `json:"topic" example:"queue:tag:status"`
	Type      string      `json:"type" enum:"queue_update"`
	Timestamp int64       `json:"timestamp" doc:"Unix ms"`
	Data      queue.Stats `json:"data"`
}

// JobUpdateEvent is a job's progress through created → processing →
// progress* → done | error (and requeued:stale, aborted:shutdown, stuck, toxic),
// on its own topic job:<q>:<task> and on queue:jobs.
type JobUpdateEvent struct {
	Topic     string         `json:"topic" example:"queue:jobs"`
	Type      string         `json:"type" enum:"job_update"`
	Timestamp int64          `json:"timestamp" doc:"Unix ms"`
	Data      queue.JobEvent `json:"data"`
}

// HostChange is the payload of a host_update event.
type HostChange struct {
	Host     string `json:"host" example:"box-2"`
	Status   string `json:"status" example:"lost" doc:"lost: its lease expired; its slots move to other hosts"`
	LastSeen int64  `json:"last_seen,omitempty" doc:"Unix ms"`
}

// HostUpdateEvent is a change of a host (host:<h>:status).
type HostUpdateEvent struct {
	Topic     string     `json:"topic" example:"host:box-2:status"`
	Type      string     `json:"type" enum:"host_update"`
	Timestamp int64      `json:"timestamp" doc:"Unix ms"`
	Data      HostChange `json:"data"`
}

// HealthUpdateEvent is the cluster's health when its status or reasons
// changed (system:health).
type HealthUpdateEvent struct {
	Topic     string       `json:"topic" example:"system:health"`
	Type      string       `json:"type" enum:"health_update"`
	Timestamp int64        `json:"timestamp" doc:"Unix ms"`
	Data      HealthReport `json:"data"`
}

// Action is what an operator (or a host, about itself) did.
type Action struct {
	Action string `json:"action" example:"pause" doc:"pause, resume, restart, stop, reset, drain, …; hosts: leader, stopped, pools_applied"`
	Target string `json:"target" example:"queue:tag" doc:"What it was done to"`
	Result string `json:"result,omitempty" example:"queue tag paused" doc:"What happened, for people"`
}

// ActionEvent is an operator action, on the topic of what it acted on.
type ActionEvent struct {
	Topic     string `json:"topic" example:"queue:tag:status"`
	Type      string `json:"type" enum:"action"`
	Timestamp int64  `json:"timestamp" doc:"Unix ms"`
	Action    Action `json:"action"`
}

// ScheduleFiredEvent says a schedule's tick (or a trigger) was decided by
// an enqueue.
type ScheduleFiredEvent struct {
	Topic     string             `json:"topic" example:"schedule:nightly"`
	Type      string             `json:"type" enum:"schedule_fired"`
	Timestamp int64              `json:"timestamp" doc:"Unix ms"`
	Data      schedule.FiredData `json:"data"`
}

// ScheduleMissedEvent says a leader found ticks of a schedule missed and
// what its catch-up policy made of them.
type ScheduleMissedEvent struct {
	Topic     string              `json:"topic" example:"schedule:nightly"`
	Type      string              `json:"type" enum:"schedule_missed"`
	Timestamp int64               `json:"timestamp" doc:"Unix ms"`
	Data      schedule.MissedData `json:"data"`
}

// SnapshotEvent is a topic's current state, sent on connect for every
// matching topic that exists; its id is the stream's last event before it
// was read.
type SnapshotEvent struct {
	Topic     string  `json:"topic" example:"worker:tag:0:status"`
	Type      string  `json:"type" enum:"snapshot"`
	Timestamp int64   `json:"timestamp" doc:"Unix ms"`
	Worker    *Worker `json:"worker,omitempty" doc:"worker topics"`
	Data      any     `json:"data,omitempty" doc:"By topic: system:health a HealthReport, host:* a Host, queue:status and queue:*:status queue Stats, queue:jobs a JobsSnapshot, job:* a Job, schedule:* a Schedule"`
}

// ResetEvent says that the Last-Event-ID could not be resumed from; a
// fresh snapshot follows.
type ResetEvent struct {
	Topic     string    `json:"topic" doc:"Empty"`
	Type      string    `json:"type" enum:"reset"`
	Timestamp int64     `json:"timestamp" doc:"Unix ms"`
	Data      ResetData `json:"data"`
}

// eventTypes maps each SSE event name to its data's type, for the spec.
var eventTypes = map[string]any{
	health.EventSnapshot:      SnapshotEvent{},
	health.EventWorker:        WorkerUpdateEvent{},
	health.EventWorkerRemoved: WorkerRemovedEvent{},
	health.EventQueue:         QueueUpdateEvent{},
	health.EventJob:           JobUpdateEvent{},
	health.EventHost:          HostUpdateEvent{},
	health.EventHealth:        HealthUpdateEvent{},
	health.EventAction:        ActionEvent{},
	health.EventReset:         ResetEvent{},
	schedule.EventFired:       ScheduleFiredEvent{},
	schedule.EventMissed:      ScheduleMissedEvent{},
}

const eventsDescription = `Server-sent events (docs/design.md §8). On connect, one ` + "`snapshot`" + ` per matching topic that exists
(its current state, read from Redis), then every change in the order of the Redis stream ` + "`vigil:events`" + `,
from every host of the cluster. Each message's ` + "`id`" + ` is a stream id; a job event is one entry under the job's topic
that is also queue:jobs's, and its queue:jobs message comes right after with that id and ` + "`.1`" + ` (a snapshot carries the id of the
last event before it was read), ` + "`event`" + ` its type and ` + "`data`" + ` a JSON object
` + "`{topic, type, timestamp, <payload>}`" + `. A job_update that changed its worker's current job (` + "`worker_seq`" + ` set) is followed by
that worker's worker_update, sent live only (not a stream entry: it carries the job event's id). A worker_update whose
` + "`rev`" + ` is below one already seen for that worker, or equal with the same pid and a lower ` + "`current_seq`" + `, is older (a
snapshot may be newer than events after it): drop it; the live stream itself never sends one older than an earlier one. Reconnecting with ` + "`Last-Event-ID`" + ` replays what was missed, or sends
` + "`reset`" + ` and a fresh snapshot when that id has been trimmed. A comment (` + "`: keep-alive`" + `) comes every
sse.keepalive (15 s). A client that falls more than sse.max_lag stream entries behind while it catches up,
that the stream's trimming overtakes meanwhile, or whose connection takes nothing for 2 to 4 s once it has
caught up, is disconnected (it resumes with Last-Event-ID); past sse.max_clients connections: 503; past sse.max_clients_per_address from one client
address: 429. At most 64 topic patterns, each of at most 256 bytes, 8 segments and 4 ` + "`*`" + `. Browsers authenticate with the session cookie
(` + "`POST /api/v1/session`" + `), since EventSource cannot send headers.`

func (s *server) registerEvents(api huma.API) {
	op := huma.Operation{
		OperationID: "stream-events", Method: http.MethodGet, Path: "/api/v1/events", Tags: []string{"events"},
		Summary:     "Live events (SSE)",
		Description: eventsDescription,
		Errors:      []int{http.StatusUnprocessableEntity, http.StatusTooManyRequests, http.StatusServiceUnavailable},
		Responses: map[string]*huma.Response{"200": {
			Description: "An endless text/event-stream",
			Content:     map[string]*huma.MediaType{"text/event-stream": {Schema: eventStreamSchema(api)}},
		}},
	}
	route(api, accessRead, op, s.events)
}

// eventStreamSchema describes the stream as Huma's sse package does: an
// array of messages, each one of the event types with its data.
func eventStreamSchema(api huma.API) *huma.Schema {
	reg := api.OpenAPI().Components.Schemas
	var names []string
	for k := range eventTypes {
		names = append(names, k)
	}
	slices.Sort(names)
	var each []*huma.Schema
	for _, k := range names {
		each = append(each, &huma.Schema{
			Title: "Event " + k,
			Type:  huma.TypeObject,
			Properties: map[string]*huma.Schema{
				"id":    {Type: huma.TypeString, Description: "A stream id of vigil:events, <ms>-<seq>; <ms>-<seq>.1 for a job event's queue:jobs message", Examples: []any{"1790000000000-0"}},
				"event": {Type: huma.TypeString, Description: "The event type", Enum: []any{k}},
				"data":  reg.Schema(reflect.TypeOf(eventTypes[k]), true, k),
			},
			Required: []string{"id", "event", "data"},
		})
	}
	return &huma.Schema{
		Title:       "Server-sent events",
		Description: "Each item is one possible message of the stream, sent as UTF-8 text per the SSE specification.",
		Type:        huma.TypeArray,
		Items:       &huma.Schema{OneOf: each},
	}
}

func (s *server) events(_ context.Context, in *EventsInput) (*huma.StreamResponse, error) {
	sub, err := parseSubscription(in.Topic)
	if err != nil {
		return nil, huma.Error422UnprocessableEntity(err.Error())
	}
	if s.broker == nil {
		return nil, huma.Error503ServiceUnavailable("no event broker")
	}
	last := cmp.Or(in.LastEventID, in.LastEventIDQuery)
	return &huma.StreamResponse{Body: func(ctx huma.Context) {
		r, w := humago.Unwrap(ctx)
		addr := s.clientAddr(r)
		if status, why := s.broker.acquire(addr); status != 0 {
			writeProblem(w, status, why)
			return
		}
		s.broker.serve(w, r, sub, last, addr)
	}}, nil
}
