package server

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/danielgtaylor/huma/v2"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/queue"
)

// QueueParam names a configured queue in the path.
type QueueParam struct {
	Queue string `path:"queue" maxLength:"63" pattern:"^[a-z0-9][a-z0-9_-]{0,62}$" example:"tag" doc:"Queue name"`
}

// QueueStats are one queue's statistics (queue.Stats, with the docs of the
// spec).
type QueueStats struct {
	Queue          string        `json:"queue" example:"tag" doc:"Queue name; empty for the total"`
	Pending        int           `json:"pending" doc:"Tasks waiting to run (asynq's pending)"`
	Running        int           `json:"running" doc:"Tasks running now (asynq's active)"`
	Scheduled      int           `json:"scheduled" doc:"Tasks scheduled for later (asynq's scheduled)"`
	Retry          int           `json:"retry" doc:"Tasks waiting for a retry (asynq's retry)"`
	Archived       int           `json:"archived" doc:"Tasks archived: retries exhausted, toxic, non-retryable (asynq's archived)"`
	Completed      int           `json:"completed" doc:"Completed tasks asynq still keeps, each for its Retention (asynq's completed); not a total: see processed_total"`
	Aggregating    int           `json:"aggregating" doc:"Tasks waiting in groups for their aggregator (asynq's aggregating)"`
	Groups         []queue.Group `json:"groups,omitempty" doc:"The queue's asynq groups with tasks waiting for the aggregator, by name (absent when none)"`
	ProcessedTotal int           `json:"processed_total" doc:"Attempts processed since the queue began, successful or not (asynq's processed counter, all time)"`
	FailedTotal    int           `json:"failed_total" doc:"Attempts that failed since the queue began, retried ones included (asynq's failed counter, all time)"`
	ProcessedToday int           `json:"processed_today" doc:"Attempts processed today, UTC (asynq's daily counter)"`
	FailedToday    int           `json:"failed_today" doc:"Attempts that failed today, UTC (asynq's daily counter)"`
	Paused         bool          `json:"paused" doc:"Paused: asynq's own key asynq:{queue}:paused exists (whoever set it: Vigil's global or queue pause, asynq's CLI, asynqmon, Inspector.PauseQueue)"`
	PausedBy       string        `json:"paused_by,omitempty" enum:"vigil,asynq" doc:"Who paused it: vigil (through Vigil's API, ctl or dashboard) or asynq (asynq's tools, or anything else that set asynq's key); absent while running"`
	PausedAt       int64         `json:"paused_at,omitempty" doc:"When it was paused (Unix ms; asynq's tools record whole seconds)"`
	PausedWho      string        `json:"paused_who,omitempty" doc:"Who asked for Vigil's pause (the request's by parameter)"`
	PauseReason    string        `json:"pause_reason,omitempty" doc:"Why (the request's reason parameter)"`
	PauseScopes    []string      `json:"pause_scopes,omitempty" doc:"Vigil's pauses that hold the queue: global, queue, or both; a Vigil resume lifts the queue's pause once none holds it"`
	AvgJobMS       float64       `json:"avg_job_ms" doc:"Rolling average job duration in milliseconds"`
	LiveWorkers    int           `json:"live_workers" doc:"Healthy workers consuming the queue"`
	ETASeconds     float64       `json:"eta_seconds" doc:"pending × average ÷ live workers; 0 when unknown"`
}

// QueueList lists the queues.
type QueueList struct {
	Queues       []QueueStats `json:"queues" nullable:"false" doc:"Every configured queue, by name"`
	Total        QueueStats   `json:"total" doc:"The sum over all queues; paused is the global pause"`
	GlobalPaused bool         `json:"global_paused" doc:"Whether Vigil's global pause is on (it holds at least one queue)"`
}

// QueuesOutput wraps QueueList.
type QueuesOutput struct{ Body QueueList }

// QueueOutput is one queue.
type QueueOutput struct{ Body QueueStats }

// PauseResult answers a pause or resume.
type PauseResult struct {
	Action  string `json:"action" enum:"pause,resume" example:"pause"`
	Queue   string `json:"queue,omitempty" example:"tag" doc:"The queue; absent for the global pause"`
	Changed bool   `json:"changed" doc:"false when it already was in that state"`
	Paused  bool   `json:"paused" doc:"Whether the queue (or, for the global pause, the global flag) is paused now"`
	Message string `json:"message" example:"queue tag paused" doc:"What happened, for people (says 'already paused' when nothing changed)"`
}

// PauseInput names who pauses and why (kept beside asynq's paused key).
type PauseInput struct {
	By     string `query:"by" maxLength:"200" doc:"Who asks (shown as paused_who), e.g. a user name"`
	Reason string `query:"reason" maxLength:"500" doc:"Why (shown as pause_reason)"`
}

// QueuePauseInput is a queue and PauseInput.
type QueuePauseInput struct {
	QueueParam
	PauseInput
}

// PauseOutput wraps PauseResult.
type PauseOutput struct{ Body PauseResult }

func (s *server) registerQueues(api huma.API) {
	route(api, accessRead, huma.Operation{
		OperationID: "list-queues", Method: http.MethodGet, Path: "/api/v1/queues", Tags: []string{"queues"},
		Summary:     "List queues",
		Description: "Statistics of every configured queue and their total: asynq's count of each task state (pending, running = active, scheduled, retry, archived, completed = kept under Retention, aggregating), asynq's totals (processed_total, failed_total: all time; processed_today, failed_today), paused and by whom, average job time and ETA.",
	}, s.listQueues)
	route(api, accessRead, huma.Operation{
		OperationID: "get-queue", Method: http.MethodGet, Path: "/api/v1/queues/{queue}", Tags: []string{"queues"},
		Summary: "Get a queue's statistics",
		Errors:  []int{http.StatusNotFound, http.StatusUnprocessableEntity},
	}, s.getQueue)
	route(api, accessWrite, huma.Operation{
		OperationID: "pause-all", Method: http.MethodPost, Path: "/api/v1/pause", Tags: []string{"queues"},
		Summary:     "Pause every queue",
		Description: "Sets the global pause: every configured queue is paused in asynq (its key asynq:{queue}:paused, which asynq's tools see), with Vigil's record beside it. Workers stay alive and idle, running jobs finish, nothing new starts. A queue already paused by asynq's tools is left as it is. 200 also when it was already paused.",
	}, s.pauseAll)
	route(api, accessWrite, huma.Operation{
		OperationID: "resume-all", Method: http.MethodPost, Path: "/api/v1/resume", Tags: []string{"queues"},
		Summary:     "Resume every queue",
		Description: "Lifts the global pause; a queue paused on its own, or by asynq's tools, stays paused (the message names them). 200 also when nothing changed.",
	}, s.resumeAll)
	route(api, accessWrite, huma.Operation{
		OperationID: "pause-queue", Method: http.MethodPost, Path: "/api/v1/queues/{queue}/pause", Tags: []string{"queues"},
		Summary:     "Pause a queue",
		Description: "Pauses the queue in asynq (its key asynq:{queue}:paused). 200 also when it was already paused (the answer says by whom).",
		Errors:      []int{http.StatusNotFound, http.StatusUnprocessableEntity},
	}, s.pauseQueue)
	route(api, accessWrite, huma.Operation{
		OperationID: "resume-queue", Method: http.MethodPost, Path: "/api/v1/queues/{queue}/resume", Tags: []string{"queues"},
		Summary:     "Resume a queue",
		Description: "Lifts the queue's own pause, or a pause made by asynq's tools; it stays paused while Vigil's global pause holds it. 200 also when nothing changed; the message says what happened.",
		Errors:      []int{http.StatusNotFound, http.StatusUnprocessableEntity},
	}, s.resumeQueue)
}

// knownQueue checks that a pool consumes q.
func (s *server) knownQueue(q string) error {
	if err := health.CheckName("queue", q); err != nil {
		return huma.Error422UnprocessableEntity(err.Error())
	}
	if _, ok := slices.BinarySearch(s.cfg.Queues, q); !ok {
		return huma.Error404NotFound("unknown queue " + q + ": no pool consumes it")
	}
	return nil
}

// liveWorkers counts the healthy workers of each queue.
func (s *server) liveWorkers(ctx context.Context) (map[string]int, error) {
	cs, err := s.store.List(ctx)
	if err != nil {
		return nil, err
	}
	live := map[string]int{}
	for _, c := range cs {
		if c.Status == health.StatusHealthy {
			live[c.ID.Queue]++
		}
	}
	return live, nil
}

func (s *server) stats(ctx context.Context, queues []string) ([]queue.Stats, queue.Stats, error) {
	live, err := s.liveWorkers(ctx)
	if err != nil {
		return nil, queue.Stats{}, err
	}
	return s.cfg.Queue.Stats(ctx, queues, live)
}

func (s *server) listQueues(ctx context.Context, _ *struct{}) (*QueuesOutput, error) {
	per, total, err := s.stats(ctx, s.cfg.Queues)
	if err != nil {
		return nil, s.fail(ctx, "queue statistics", err)
	}
	out := &QueuesOutput{}
	out.Body.Queues = make([]QueueStats, len(per))
	for i, st := range per {
		out.Body.Queues[i] = QueueStats(st)
	}
	out.Body.Total, out.Body.GlobalPaused = QueueStats(total), total.Paused
	return out, nil
}

func (s *server) getQueue(ctx context.Context, in *QueueParam) (*QueueOutput, error) {
	if err := s.knownQueue(in.Queue); err != nil {
		return nil, err
	}
	per, _, err := s.stats(ctx, []string{in.Queue})
	if err != nil {
		return nil, s.fail(ctx, "statistics of queue "+in.Queue, err)
	}
	return &QueueOutput{Body: QueueStats(per[0])}, nil
}

func (in PauseInput) actor() queue.Actor {
	return queue.Actor{Who: cmp.Or(in.By, "vigil api"), Why: in.Reason}
}

func (s *server) pauseAll(ctx context.Context, in *PauseInput) (*PauseOutput, error) {
	outs, flag, err := s.cfg.Queue.PauseAll(ctx, s.cfg.Queues, in.actor())
	if err != nil {
		return nil, s.fail(ctx, "pause all queues", err)
	}
	changed := flag
	var byAsynq []string
	for _, q := range s.cfg.Queues {
		changed = changed || queue.Changed(outs[q])
		if outs[q] == queue.OutAsynqPaused {
			byAsynq = append(byAsynq, q)
		}
	}
	r := PauseResult{Action: "pause", Changed: changed, Paused: true, Message: "all queues paused"}
	if !changed {
		r.Message = "all queues were already paused"
	}
	if len(byAsynq) > 0 {
		r.Message += "; already paused by asynq's tools (left as they are): " + strings.Join(byAsynq, ", ")
	}
	s.announce(ctx, "queue:status", r.Action, "all", r.Message)
	return &PauseOutput{Body: r}, nil
}

func (s *server) resumeAll(ctx context.Context, _ *struct{}) (*PauseOutput, error) {
	outs, flag, err := s.cfg.Queue.ResumeAll(ctx, s.cfg.Queues)
	if err != nil {
		return nil, s.fail(ctx, "resume all queues", err)
	}
	changed := flag
	var own, byAsynq []string
	for _, q := range s.cfg.Queues {
		changed = changed || queue.Changed(outs[q])
		switch outs[q] {
		case queue.OutOtherScope, queue.OutScopeRemoved:
			own = append(own, q)
		case queue.OutAsynqKept:
			byAsynq = append(byAsynq, q)
		}
	}
	r := PauseResult{Action: "resume", Changed: changed, Message: "global pause lifted"}
	if !changed {
		r.Message = "the global pause was already off"
	}
	if len(own) > 0 {
		r.Message += "; paused on their own, still paused: " + strings.Join(own, ", ")
	}
	if len(byAsynq) > 0 {
		r.Message += "; paused by asynq's tools, still paused: " + strings.Join(byAsynq, ", ")
	}
	s.announce(ctx, "queue:status", r.Action, "all", r.Message)
	return &PauseOutput{Body: r}, nil
}

// pauseMessages say, for people, what a queue's pause or resume did.
var pauseMessages = map[string]string{
	queue.OutPaused:       "queue %s paused",
	queue.OutScopeAdded:   "queue %s paused on its own (the global pause held it already)",
	queue.OutAlready:      "queue %s was already paused",
	queue.OutAsynqPaused:  "queue %s was already paused by asynq's tools; left as it is",
	queue.OutResumed:      "queue %s resumed",
	queue.OutScopeRemoved: "queue %s: its own pause lifted; it stays paused while the global pause holds",
	queue.OutOtherScope:   "queue %s was not paused on its own; it stays paused while the global pause holds",
	queue.OutAsynqResumed: "queue %s had been paused by asynq's tools; resumed",
	queue.OutNotPaused:    "queue %s was not paused",
	queue.OutStale:        "queue %s was not paused: asynq's tools had already resumed it",
}

func (s *server) pauseQueue(ctx context.Context, in *QueuePauseInput) (*PauseOutput, error) {
	if err := s.knownQueue(in.Queue); err != nil {
		return nil, err
	}
	out, err := s.cfg.Queue.PauseQueue(ctx, in.Queue, in.actor())
	if err != nil {
		return nil, s.fail(ctx, "pause queue "+in.Queue, err)
	}
	r := PauseResult{Action: "pause", Queue: in.Queue, Changed: queue.Changed(out), Paused: true,
		Message: fmt.Sprintf(pauseMessages[out], in.Queue)}
	s.announce(ctx, "queue:"+in.Queue+":status", r.Action, "queue:"+in.Queue, r.Message)
	return &PauseOutput{Body: r}, nil
}

func (s *server) resumeQueue(ctx context.Context, in *QueueParam) (*PauseOutput, error) {
	if err := s.knownQueue(in.Queue); err != nil {
		return nil, err
	}
	out, err := s.cfg.Queue.ResumeQueue(ctx, in.Queue)
	if err != nil {
		return nil, s.fail(ctx, "resume queue "+in.Queue, err)
	}
	r := PauseResult{Action: "resume", Queue: in.Queue, Changed: queue.Changed(out),
		Paused:  out == queue.OutScopeRemoved || out == queue.OutOtherScope,
		Message: fmt.Sprintf(pauseMessages[out], in.Queue)}
	s.announce(ctx, "queue:"+in.Queue+":status", r.Action, "queue:"+in.Queue, r.Message)
	return &PauseOutput{Body: r}, nil
}
