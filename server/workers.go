package server

import (
	"context"
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/queue"
)

// Worker is one component as the API shows it (health.WorkerView, with
// the docs of the spec).
type Worker struct {
	Component        string           `json:"component" example:"worker:tag:0" doc:"Component id, worker:<queue>:<slot>"`
	ID               int              `json:"id" example:"0" doc:"Slot number within the pool"`
	QueueType        string           `json:"queue_type" example:"tag" doc:"The queue the worker consumes"`
	Status           string           `json:"status" enum:"starting,healthy,recovering,stopping,stopped,crashed,failed" example:"healthy" doc:"Lifecycle status (docs/workers.md \"Worker statuses\")"`
	Reason           string           `json:"reason,omitempty" example:"exit code 1" doc:"Why it is in this status"`
	Held             bool             `json:"held" doc:"Stopped by an operator: not started again until an operator restart"`
	Host             string           `json:"host,omitempty" example:"box-1" doc:"Host that runs it"`
	PID              int              `json:"pid,omitempty" example:"4242" doc:"Process id on that host"`
	CurrentJob       string           `json:"current_job,omitempty" doc:"Task the worker runs now, if any (with several at once: the one it started last)"`
	CurrentSeq       int64            `json:"current_seq,omitempty" example:"42" doc:"Number of current_job's change within the worker's process (1, 2, …): of two views of one pid with the same rev, the higher current_seq is newer"`
	Rev              int64            `json:"rev,omitempty" example:"1790000001000000" doc:"The record's revision: every change of the record but current_job raises it (to at least Redis's clock in µs at the change). A worker_update with a lower rev than one already seen is older: drop it"`
	ExitCode         *int             `json:"exit_code,omitempty" example:"1" doc:"Code of the last exit (-1 unknown, -2 heartbeat timeout, -3 invalid heartbeat, 128+N signal N)"`
	Signal           string           `json:"signal,omitempty" example:"SIGKILL" doc:"Signal that ended the last process, if any"`
	RestartCount     int              `json:"restart_count" example:"0" doc:"Consecutive counted restarts"`
	LifetimeRestarts int              `json:"lifetime_restarts" example:"3" doc:"Counted restarts since the last reset"`
	StartedAt        int64            `json:"started_at,omitempty" example:"1790000000000" doc:"Start of the current process (Unix ms)"`
	LastHeartbeat    int64            `json:"last_heartbeat,omitempty" example:"1790000005000" doc:"Last heartbeat (Unix ms)"`
	HealthySince     int64            `json:"healthy_since,omitempty" example:"1790000001000" doc:"Healthy without interruption since (Unix ms)"`
	UpdatedAt        int64            `json:"updated_at,omitempty" example:"1790000001000" doc:"Last change of the record (Unix ms)"`
	FailedAt         int64            `json:"failed_at,omitempty" doc:"When it was marked failed (Unix ms)"`
	FailureReason    string           `json:"failure_reason,omitempty" example:"5 crashes within 5m0s" doc:"Why it was marked failed"`
	LastRestart      int64            `json:"last_restart,omitempty" example:"1790000000500" doc:"When the last counted restart was decided (Unix ms)"`
	RecentCrashes    []int64          `json:"recent_crashes,omitempty" example:"[1790000000000]" doc:"Times of the counted crashes in the restart policy's window, oldest first (Unix ms): the window the policy judges"`
	RecoveringUntil  int64            `json:"recovering_until,omitempty" example:"1790000060000" doc:"While recovering: when the window its heartbeat announced ends (Unix ms); past it without an ordinary beat, the worker is a crash"`
	CreatedAt        int64            `json:"created_at,omitempty" example:"1789990000000" doc:"First registration of this worker (Unix ms), set once; a slot removed and grown back starts again"`
	Version          string           `json:"version,omitempty" example:"v1.4.2" doc:"Version its process reports in its heartbeat (VIGIL_VERSION, or its Go binary's build info)"`
	Stats            map[string]int64 `json:"stats,omitempty" example:"{\"jobs_done\":120,\"heartbeats\":512,\"failures:RETRY\":2}" doc:"GET of one worker: the counters its process reports (heartbeats, jobs_done, failures:<CODE>, inflight, …; docs/observability.md \"Metrics\")"`
	Paused           bool             `json:"paused,omitempty" doc:"Paused by an operator (POST .../pause): the worker takes no task, keeps beating and finishes what it runs; survives its restarts"`
	PausedBy         string           `json:"paused_by,omitempty" example:"alice" doc:"Who paused it"`
	PausedAt         int64            `json:"paused_at,omitempty" doc:"When it was paused (Unix ms)"`
	PauseReason      string           `json:"pause_reason,omitempty" example:"disk check" doc:"Why"`
}

func workerOf(c health.Component) Worker { return Worker(c.View()) }

// ComponentParam names a component in the path. Ids are validated here
// and again when parsed: nothing malformed reaches a Redis key.
type ComponentParam struct {
	Component string `path:"component" maxLength:"80" pattern:"^worker:[a-z0-9][a-z0-9_-]{0,62}:(0|[1-9][0-9]{0,5})$" example:"worker:tag:0" doc:"Component id, worker:<queue>:<slot>"`
}

func (p ComponentParam) id() (health.ComponentID, error) {
	id, err := health.ParseComponentID(p.Component)
	if err != nil {
		return id, huma.Error422UnprocessableEntity(err.Error())
	}
	return id, nil
}

// WorkerList lists workers.
type WorkerList struct {
	Workers []Worker `json:"workers" nullable:"false" doc:"Every known component of the cluster, by queue then slot"`
}

// WorkersOutput wraps WorkerList.
type WorkersOutput struct{ Body WorkerList }

// WorkerOutput is one worker.
type WorkerOutput struct{ Body Worker }

// WorkerAction is the answer to an action on a worker.
type WorkerAction struct {
	Action  string `json:"action" enum:"restart,stop,reset,pause,resume,remove" example:"restart" doc:"What was done"`
	Message string `json:"message" example:"worker:tag:0 restarted" doc:"What happened, for people"`
	Worker  Worker `json:"worker" doc:"The worker's state once the action was written"`
}

// WorkerActionOutput wraps WorkerAction.
type WorkerActionOutput struct{ Body WorkerAction }

// ResetInput is the reset action's input.
type ResetInput struct {
	ComponentParam
	Restart bool `query:"restart" doc:"Start the worker again right after the reset"`
}

// WorkerLogs is a worker's recent output.
type WorkerLogs struct {
	Component string   `json:"component" example:"worker:tag:0"`
	Lines     []string `json:"lines" nullable:"false" doc:"The last lines the worker printed (stdout and stderr), oldest first"`
}

// LogsOutput wraps WorkerLogs.
type LogsOutput struct{ Body WorkerLogs }

func (s *server) registerWorkers(api huma.API) {
	route(api, accessRead, huma.Operation{
		OperationID: "list-workers", Method: http.MethodGet, Path: "/api/v1/workers", Tags: []string{"workers"},
		Summary:     "List workers",
		Description: "Every known component of the cluster with its status and restart history.",
	}, s.listWorkers)
	route(api, accessRead, huma.Operation{
		OperationID: "get-worker", Method: http.MethodGet, Path: "/api/v1/workers/{component}", Tags: []string{"workers"},
		Summary: "Get a worker",
		Errors:  []int{http.StatusNotFound, http.StatusUnprocessableEntity},
	}, s.getWorker)
	route(api, accessRead, huma.Operation{
		OperationID: "get-worker-logs", Method: http.MethodGet, Path: "/api/v1/workers/{component}/logs", Tags: []string{"workers"},
		Summary:     "A worker's recent output",
		Description: "The last lines the worker printed, as kept by the host that runs it (empty on other hosts).",
		Errors:      []int{http.StatusNotFound, http.StatusUnprocessableEntity},
	}, s.workerLogs)
	route(api, accessWrite, huma.Operation{
		OperationID: "restart-worker", Method: http.MethodPost, Path: "/api/v1/workers/{component}/restart", Tags: []string{"workers"},
		Summary:     "Restart a worker now",
		Description: "Stops the worker gracefully if it runs and starts it again at once, bypassing backoff; not counted against the restart limits. Also starts a failed or held worker (a failed one keeps its lifetime count).",
		Errors:      []int{http.StatusNotFound, http.StatusConflict, http.StatusUnprocessableEntity, http.StatusServiceUnavailable},
	}, s.restartWorker)
	route(api, accessWrite, huma.Operation{
		OperationID: "stop-worker", Method: http.MethodPost, Path: "/api/v1/workers/{component}/stop", Tags: []string{"workers"},
		Summary:     "Stop a worker",
		Description: "Stops the worker gracefully (SIGTERM, then SIGKILL after stop_timeout) and holds it stopped: it is not started again until an operator restart.",
		Errors:      []int{http.StatusNotFound, http.StatusConflict, http.StatusUnprocessableEntity, http.StatusServiceUnavailable},
	}, s.stopWorker)
	route(api, accessWrite, huma.Operation{
		OperationID: "reset-worker", Method: http.MethodPost, Path: "/api/v1/workers/{component}/reset", Tags: []string{"workers"},
		Summary:     "Reset a worker",
		Description: "Clears the restart history (counts, crash window, failed_at) and leaves the worker stopped and held; `restart=true` starts it at once. 409 while it runs (starting, healthy, recovering or stopping): stop it first.",
		Errors:      []int{http.StatusNotFound, http.StatusConflict, http.StatusUnprocessableEntity, http.StatusServiceUnavailable},
	}, s.resetWorker)
}

func (s *server) listWorkers(ctx context.Context, _ *struct{}) (*WorkersOutput, error) {
	cs, err := s.store.List(ctx)
	if err != nil {
		return nil, s.fail(ctx, "list workers", err)
	}
	out := &WorkersOutput{}
	out.Body.Workers = make([]Worker, len(cs))
	for i, c := range cs {
		out.Body.Workers[i] = workerOf(c)
	}
	if err := s.withPauses(ctx, out.Body.Workers); err != nil {
		return nil, s.fail(ctx, "list workers", err)
	}
	return out, nil
}

func (s *server) getWorker(ctx context.Context, in *ComponentParam) (*WorkerOutput, error) {
	id, err := in.id()
	if err != nil {
		return nil, err
	}
	c, err := s.store.Get(ctx, id)
	if err != nil {
		return nil, s.fail(ctx, "read "+id.String(), err)
	}
	w := []Worker{workerOf(c)}
	if err := s.withPauses(ctx, w); err != nil {
		return nil, s.fail(ctx, "read "+id.String(), err)
	}
	stats, err := queue.ReadWorkerStats(ctx, s.store, []health.ComponentID{id})
	if err != nil {
		return nil, s.fail(ctx, "read "+id.String(), err)
	}
	if len(stats[0]) > 0 {
		w[0].Stats = stats[0]
	}
	return &WorkerOutput{Body: w[0]}, nil
}

func (s *server) workerLogs(ctx context.Context, in *ComponentParam) (*LogsOutput, error) {
	id, err := in.id()
	if err != nil {
		return nil, err
	}
	if _, err := s.store.Get(ctx, id); err != nil {
		return nil, s.fail(ctx, "read "+id.String(), err)
	}
	out := &LogsOutput{}
	out.Body.Component, out.Body.Lines = id.String(), s.cfg.supervisor().Logs(id)
	if out.Body.Lines == nil {
		out.Body.Lines = []string{}
	}
	return out, nil
}

// workerAction runs one supervisor action and announces it.
func (s *server) workerAction(ctx context.Context, p ComponentParam, action, done string,
	do func(context.Context, health.ComponentID) (health.Component, error)) (*WorkerActionOutput, error) {
	id, err := p.id()
	if err != nil {
		return nil, err
	}
	// A component Redis has never heard of is a 404 whoever runs it.
	if _, err := s.store.Get(ctx, id); err != nil {
		return nil, s.fail(ctx, action+" "+id.String(), err)
	}
	c, err := do(ctx, id)
	if err != nil {
		return nil, s.fail(ctx, action+" "+id.String(), err)
	}
	msg := id.String() + " " + done
	s.announce(ctx, id.Topic(), action, id.String(), msg)
	return &WorkerActionOutput{Body: WorkerAction{Action: action, Message: msg, Worker: workerOf(c)}}, nil
}

func (s *server) restartWorker(ctx context.Context, in *ComponentParam) (*WorkerActionOutput, error) {
	return s.workerAction(ctx, *in, "restart", "restarted", s.cfg.supervisor().Restart)
}

func (s *server) stopWorker(ctx context.Context, in *ComponentParam) (*WorkerActionOutput, error) {
	return s.workerAction(ctx, *in, "stop", "stopped and held", s.cfg.supervisor().StopComponent)
}

func (s *server) resetWorker(ctx context.Context, in *ResetInput) (*WorkerActionOutput, error) {
	done := "reset: stopped and held"
	if in.Restart {
		done = "reset and started"
	}
	return s.workerAction(ctx, in.ComponentParam, "reset", done, func(ctx context.Context, id health.ComponentID) (health.Component, error) {
		return s.cfg.supervisor().Reset(ctx, id, in.Restart)
	})
}

// supervisor is cfg.Supervisor or, when there is none, one that knows no
// component.
func (c Config) supervisor() Supervisor {
	if c.Supervisor == nil {
		return noSupervisor{}
	}
	return c.Supervisor
}

type noSupervisor struct{}

func (noSupervisor) Restart(_ context.Context, id health.ComponentID) (health.Component, error) {
	return health.Component{}, unknownComponent(id)
}
func (noSupervisor) StopComponent(_ context.Context, id health.ComponentID) (health.Component, error) {
	return health.Component{}, unknownComponent(id)
}
func (noSupervisor) Reset(_ context.Context, id health.ComponentID, _ bool) (health.Component, error) {
	return health.Component{}, unknownComponent(id)
}
func (noSupervisor) Remove(_ context.Context, id health.ComponentID) error {
	return unknownComponent(id)
}
func (noSupervisor) Logs(health.ComponentID) []string { return nil }
