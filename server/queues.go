package server

import (
	"context"
	"net/http"
	"slices"

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
	Queue       string  `json:"queue" example:"tag" doc:"Queue name; empty for the total"`
	Pending     int     `json:"pending" doc:"Tasks waiting to run"`
	Running     int     `json:"running" doc:"Tasks running now"`
	Scheduled   int     `json:"scheduled" doc:"Tasks scheduled for later"`
	Retry       int     `json:"retry" doc:"Tasks waiting for a retry"`
	Completed   int     `json:"completed" doc:"Tasks processed successfully (cumulative)"`
	Failed      int     `json:"failed" doc:"Tasks whose processing failed (cumulative)"`
	Archived    int     `json:"archived" doc:"Tasks archived (retries exhausted, toxic, cancelled)"`
	Paused      bool    `json:"paused" doc:"Paused, by the global pause or its own"`
	AvgJobMS    float64 `json:"avg_job_ms" doc:"Rolling average job duration in milliseconds"`
	LiveWorkers int     `json:"live_workers" doc:"Healthy workers consuming the queue"`
	ETASeconds  float64 `json:"eta_seconds" doc:"pending × average ÷ live workers; 0 when unknown"`
}

// QueueList lists the queues.
type QueueList struct {
	Queues       []QueueStats `json:"queues" nullable:"false" doc:"Every configured queue, by name"`
	Total        QueueStats   `json:"total" doc:"The sum over all queues; paused is the global pause"`
	GlobalPaused bool         `json:"global_paused" doc:"Whether the global pause is on"`
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

// PauseOutput wraps PauseResult.
type PauseOutput struct{ Body PauseResult }

func (s *server) registerQueues(api huma.API) {
	route(api, accessRead, huma.Operation{
		OperationID: "list-queues", Method: http.MethodGet, Path: "/api/v1/queues", Tags: []string{"queues"},
		Summary:     "List queues",
		Description: "Statistics of every configured queue and their total: pending, running, completed, failed, archived, paused, average job time and ETA.",
	}, s.listQueues)
	route(api, accessRead, huma.Operation{
		OperationID: "get-queue", Method: http.MethodGet, Path: "/api/v1/queues/{queue}", Tags: []string{"queues"},
		Summary: "Get a queue's statistics",
		Errors:  []int{http.StatusNotFound, http.StatusUnprocessableEntity},
	}, s.getQueue)
	route(api, accessWrite, huma.Operation{
		OperationID: "pause-all", Method: http.MethodPost, Path: "/api/v1/pause", Tags: []string{"queues"},
		Summary:     "Pause every queue",
		Description: "Sets the global pause: workers stay alive and idle, running jobs finish, nothing new starts. 200 also when it was already paused.",
	}, s.pauseAll)
	route(api, accessWrite, huma.Operation{
		OperationID: "resume-all", Method: http.MethodPost, Path: "/api/v1/resume", Tags: []string{"queues"},
		Summary:     "Resume every queue",
		Description: "Clears the global pause; a queue paused on its own stays paused. 200 also when nothing changed.",
	}, s.resumeAll)
	route(api, accessWrite, huma.Operation{
		OperationID: "pause-queue", Method: http.MethodPost, Path: "/api/v1/queues/{queue}/pause", Tags: []string{"queues"},
		Summary:     "Pause a queue",
		Description: "200 also when it was already paused (the answer says so).",
		Errors:      []int{http.StatusNotFound, http.StatusUnprocessableEntity},
	}, s.pauseQueue)
	route(api, accessWrite, huma.Operation{
		OperationID: "resume-queue", Method: http.MethodPost, Path: "/api/v1/queues/{queue}/resume", Tags: []string{"queues"},
		Summary:     "Resume a queue",
		Description: "Clears the queue's own pause; it stays paused while the global pause holds. 200 also when nothing changed.",
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

func (s *server) pauseAll(ctx context.Context, _ *struct{}) (*PauseOutput, error) {
	changed, err := s.cfg.Queue.PauseAll(ctx, s.cfg.Queues)
	if err != nil {
		return nil, s.fail(ctx, "pause all queues", err)
	}
	r := PauseResult{Action: "pause", Changed: changed, Paused: true, Message: "all queues paused"}
	if !changed {
		r.Message = "all queues were already paused"
	}
	s.announce(ctx, "queue:status", r.Action, "all", r.Message)
	return &PauseOutput{Body: r}, nil
}

func (s *server) resumeAll(ctx context.Context, _ *struct{}) (*PauseOutput, error) {
	changed, err := s.cfg.Queue.ResumeAll(ctx, s.cfg.Queues)
	if err != nil {
		return nil, s.fail(ctx, "resume all queues", err)
	}
	r := PauseResult{Action: "resume", Changed: changed, Message: "global pause lifted"}
	if !changed {
		r.Message = "the global pause was already off"
	}
	if st, err := s.cfg.Queue.State(ctx); err == nil && len(st.Queues) > 0 {
		r.Message += "; queues paused on their own stay paused"
	}
	s.announce(ctx, "queue:status", r.Action, "all", r.Message)
	return &PauseOutput{Body: r}, nil
}

func (s *server) pauseQueue(ctx context.Context, in *QueueParam) (*PauseOutput, error) {
	if err := s.knownQueue(in.Queue); err != nil {
		return nil, err
	}
	changed, err := s.cfg.Queue.PauseQueue(ctx, in.Queue)
	if err != nil {
		return nil, s.fail(ctx, "pause queue "+in.Queue, err)
	}
	r := PauseResult{Action: "pause", Queue: in.Queue, Changed: changed, Paused: true, Message: "queue " + in.Queue + " paused"}
	if !changed {
		r.Message = "queue " + in.Queue + " was already paused"
	}
	s.announce(ctx, "queue:"+in.Queue+":status", r.Action, "queue:"+in.Queue, r.Message)
	return &PauseOutput{Body: r}, nil
}

func (s *server) resumeQueue(ctx context.Context, in *QueueParam) (*PauseOutput, error) {
	if err := s.knownQueue(in.Queue); err != nil {
		return nil, err
	}
	changed, err := s.cfg.Queue.ResumeQueue(ctx, in.Queue)
	if err != nil {
		return nil, s.fail(ctx, "resume queue "+in.Queue, err)
	}
	r := PauseResult{Action: "resume", Queue: in.Queue, Changed: changed, Message: "queue " + in.Queue + " resumed"}
	if !changed {
		r.Message = "queue " + in.Queue + " was not paused on its own"
	}
	if st, err := s.cfg.Queue.State(ctx); err == nil && st.Global {
		r.Paused = true
		r.Message += "; it stays paused while the global pause holds"
	}
	s.announce(ctx, "queue:"+in.Queue+":status", r.Action, "queue:"+in.Queue, r.Message)
	return &PauseOutput{Body: r}, nil
}
