package server

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"

	"github.com/danielgtaylor/huma/v2"

	"github.com/vigil-dev/vigil/health"
)

// Limits of GET /api/v1/events/history.
const (
	// HistoryLimitMax is the most events one answer holds.
	HistoryLimitMax = 1000
	// HistoryScanMax is the most stream entries one request reads: more
	// than the stream keeps (trimmed to about health.MaxEventsDefault, a
	// few hundred more between trims), so one request can read all of it.
	HistoryScanMax = health.MaxEventsDefault + 2000
	// historyPage is how many entries one XREVRANGE reads.
	historyPage = 500
)

// historyScanMax is HistoryScanMax, lowered by a test.
var historyScanMax = HistoryScanMax

// HistoryInput selects past events of the stream.
type HistoryInput struct {
	Topic  []string `query:"topic,explode" maxItems:"64" example:"job:tag:5b9c4a1e-8f2d-4c1a-9a51-0c2f4b8e6d71" doc:"Topic patterns, repeated, as for GET /api/v1/events (* stands for one or more whole segments). None: every topic."`
	Since  int64    `query:"since" minimum:"0" example:"1790000000000" doc:"Only events from this time on (Unix ms); 0: as far back as the stream goes"`
	Before string   `query:"before" maxLength:"43" pattern:"^[0-9]+-[0-9]+(\\.1)?$" example:"1790000000000-0" doc:"Only events before this event id: the next_before of the previous answer, to page back"`
	Limit  int      `query:"limit" minimum:"1" maximum:"1000" default:"100" doc:"Most events in the answer: the newest ones that match"`
}

// HistoryEvent is one past event, as the event stream sent it.
type HistoryEvent struct {
	ID        string          `json:"id" example:"1790000000000-0" doc:"Its SSE id: its entry's id in the stream, and for the queue:jobs copy of a job event written once (an entry that is also queue:jobs's) that id with .1"`
	Topic     string          `json:"topic" example:"worker:tag:0:status"`
	Type      string          `json:"type" enum:"worker_update,worker_removed,queue_update,job_update,host_update,health_update,action" example:"worker_update"`
	Timestamp int64           `json:"timestamp" doc:"Unix ms"`
	Worker    *Worker         `json:"worker,omitempty" doc:"worker_update: the worker's new state; worker_removed: its last"`
	Action    *Action         `json:"action,omitempty" doc:"action: what an operator did"`
	Data      json.RawMessage `json:"data,omitempty" doc:"The other types' payload, as in the event stream (job_update: a job event, queue_update: queue statistics, …)"`
}

// History is a page of past events.
type History struct {
	Events     []HistoryEvent `json:"events" nullable:"false" doc:"The matching events, oldest first"`
	More       bool           `json:"more" doc:"Older matching events may be in the stream: ask again with before=next_before"`
	NextBefore string         `json:"next_before,omitempty" example:"1790000000000-0" doc:"With more: where the next page (older events) ends"`
	From       int64          `json:"from" doc:"The answer holds every matching event the stream kept from this time on (Unix ms): since, or the stream's oldest event when it has none as old, or where this page stopped"`
}

// HistoryOutput wraps History.
type HistoryOutput struct{ Body History }

func (s *server) registerHistory(api huma.API) {
	route(api, accessRead, huma.Operation{
		OperationID: "list-events", Method: http.MethodGet, Path: "/api/v1/events/history", Tags: []string{"events"},
		Summary: "Past events",
		Description: "The events still in the stream `vigil:events` (trimmed to about 10,000 entries) that match the topics, newest first up to limit, " +
			"answered oldest first: a job's events (`job:<q>:<task>`), a worker's past statuses with their exit codes and reasons " +
			"(`worker:<q>:<slot>:status`), the recent job outcomes of every queue (`queue:jobs`). One request reads at most 12,000 entries.",
		Errors: []int{http.StatusUnprocessableEntity},
	}, s.history)
}

func (s *server) history(ctx context.Context, in *HistoryInput) (*HistoryOutput, error) {
	sub, err := parseSubscription(in.Topic)
	if err != nil {
		return nil, huma.Error422UnprocessableEntity(err.Error())
	}
	end, before := "+", streamID{}
	if in.Before != "" {
		var ok bool
		before, ok = parseStreamID(in.Before)
		if !ok {
			return nil, huma.Error422UnprocessableEntity("before must be an event id, <ms>-<seq> or <ms>-<seq>.1")
		}
		end = "(" + before.entry()
		if before.n > 0 || before == zeroID {
			// Its own event is before its also event; no entry is 0-0
			// (and Redis refuses the range before it).
			end = before.entry()
		}
	}
	start := "-"
	if in.Since > 0 {
		start = strconv.FormatInt(in.Since, 10) + "-0"
	}
	limit := min(max(in.Limit, 1), HistoryLimitMax)
	rdb, key := s.store.Client(), s.store.Keys().Events()

	out := &HistoryOutput{}
	h := &out.Body
	h.Events = []HistoryEvent{}
	scanned, last := 0, ""
	var next streamID // the last event looked at
	for {
		page := min(historyPage, historyScanMax-scanned)
		msgs, err := rdb.XRevRangeN(ctx, key, end, start, int64(page)).Result()
		if err != nil {
			return nil, s.fail(ctx, "read the event stream", err)
		}
	scan:
		for _, m := range msgs {
			scanned++
			last = m.ID
			id := mustID(m.ID)
			evs := health.EntryEvents(m.Values)
			// Newest first: an entry's also event comes after its own.
			for i := len(evs) - 1; i >= 0; i-- {
				ev := evs[i]
				eid := id
				if ev.Also {
					eid = id.also()
				}
				if before.n > 0 && eid.cmp(before) >= 0 {
					continue // on the page before
				}
				next = eid
				if !sub.match(ev.Topic) {
					continue
				}
				var e HistoryEvent
				if json.Unmarshal(ev.Data, &e) != nil {
					continue
				}
				e.ID = eid.String()
				h.Events = append(h.Events, e)
				if len(h.Events) == limit {
					break scan
				}
			}
			next = id
		}
		if len(h.Events) == limit || scanned >= historyScanMax {
			if len(msgs) > 0 {
				h.More, h.NextBefore = true, next.String()
				h.From = int64(mustID(last).ms) + 1
			}
			break
		}
		if len(msgs) < page {
			// The range is read to its start: everything since `since`
			// that the stream kept is here.
			first, err := rdb.XRangeN(ctx, key, "-", "+", 1).Result()
			if err != nil {
				return nil, s.fail(ctx, "read the event stream", err)
			}
			h.From = in.Since
			if len(first) > 0 {
				h.From = max(h.From, int64(mustID(first[0].ID).ms))
			}
			break
		}
		end = "(" + last
	}
	slices.Reverse(h.Events)
	return out, nil
}
