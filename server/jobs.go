package server

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/hibiken/asynq"

	"github.com/vigil-dev/vigil/queue"
)

// Job is one asynq task as the API shows it.
type Job struct {
	ID            string          `json:"id" example:"5b9c4a1e-8f2d-4c1a-9a51-0c2f4b8e6d71" doc:"Task id"`
	Queue         string          `json:"queue" example:"tag"`
	Type          string          `json:"type" example:"demo:sleep" doc:"Task type (which handler runs it)"`
	State         string          `json:"state" enum:"pending,active,scheduled,retry,archived,completed,aggregating" example:"pending"`
	Payload       json.RawMessage `json:"payload,omitempty" doc:"The payload, when it is JSON"`
	PayloadBase64 string          `json:"payload_base64,omitempty" doc:"The payload, base64-encoded, when it is not JSON"`
	MaxRetry      int             `json:"max_retry" example:"25" doc:"Retries allowed for handler errors"`
	Retried       int             `json:"retried" example:"0" doc:"Retries so far"`
	LastError     string          `json:"last_error,omitempty" example:"toxic: worker crashed 3 times" doc:"Error of the last failed attempt"`
	LastFailedAt  int64           `json:"last_failed_at,omitempty" doc:"When the last attempt failed (Unix ms)"`
	Toxic         bool            `json:"toxic" doc:"Archived because it crashed its workers too often (DESIGN.md §6)"`
	ToxicReason   string          `json:"toxic_reason,omitempty" example:"toxic: worker crashed 3 times" doc:"Why it is toxic"`
	TimeoutS      float64         `json:"timeout_seconds,omitempty" doc:"Per-attempt timeout in seconds"`
	Deadline      int64           `json:"deadline,omitempty" doc:"Deadline (Unix ms)"`
	NextProcessAt int64           `json:"next_process_at,omitempty" doc:"When it is due to run (Unix ms; pending: when it was enqueued)"`
	CompletedAt   int64           `json:"completed_at,omitempty" doc:"When it completed (Unix ms)"`
	Orphaned      bool            `json:"orphaned,omitempty" doc:"Active, but its worker is gone (asynq recovers it after the lease)"`
}

// toxicPrefix starts the last error of a task archived as toxic.
const toxicPrefix = "toxic:"

func jobOf(t *asynq.TaskInfo) Job {
	j := Job{
		ID: t.ID, Queue: t.Queue, Type: t.Type, State: t.State.String(), MaxRetry: t.MaxRetry, Retried: t.Retried,
		LastError: t.LastErr, LastFailedAt: unixMS(t.LastFailedAt), TimeoutS: t.Timeout.Seconds(),
		Deadline: unixMS(t.Deadline), NextProcessAt: unixMS(t.NextProcessAt), CompletedAt: unixMS(t.CompletedAt),
		Orphaned: t.IsOrphaned,
	}
	if len(t.Payload) > 0 {
		if json.Valid(t.Payload) {
			j.Payload = json.RawMessage(t.Payload)
		} else {
			j.PayloadBase64 = base64.StdEncoding.EncodeToString(t.Payload)
		}
	}
	if t.State == asynq.TaskStateArchived && strings.HasPrefix(t.LastErr, toxicPrefix) {
		j.Toxic, j.ToxicReason = true, t.LastErr
	}
	return j
}

func unixMS(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

// JobParam names a job in the path.
type JobParam struct {
	QueueParam
	ID string `path:"id" maxLength:"128" pattern:"^[A-Za-z0-9][A-Za-z0-9._-]*$" example:"5b9c4a1e-8f2d-4c1a-9a51-0c2f4b8e6d71" doc:"Task id"`
}

// ListJobsInput selects jobs of a queue.
type ListJobsInput struct {
	QueueParam
	State    string `query:"state" enum:"pending,active,scheduled,retry,archived,completed" default:"pending" doc:"Which jobs (archived ones include toxic jobs, with their reason)"`
	Page     int    `query:"page" minimum:"1" maximum:"100000" default:"1" doc:"Page number, from 1"`
	PageSize int    `query:"page_size" minimum:"1" maximum:"500" default:"50" doc:"Jobs per page"`
}

// JobList is a page of jobs.
type JobList struct {
	Queue    string `json:"queue" example:"tag"`
	State    string `json:"state" example:"pending"`
	Page     int    `json:"page" example:"1"`
	PageSize int    `json:"page_size" example:"50"`
	Jobs     []Job  `json:"jobs" nullable:"false"`
}

// JobsOutput wraps JobList.
type JobsOutput struct{ Body JobList }

// JobOutput is one job.
type JobOutput struct{ Body Job }

// CreatedJobOutput is an enqueued job.
type CreatedJobOutput struct {
	Location string `header:"Location" doc:"The new job's URL, relative to the API root"`
	Body     Job
}

// JobAction answers an action on a job.
type JobAction struct {
	Action  string `json:"action" enum:"retry,cancel" example:"retry"`
	Message string `json:"message" example:"job 5b9c… of queue tag will run now"`
	Job     *Job   `json:"job,omitempty" doc:"The job after the action (absent when it was cancelled while running: its state changes when the worker notices)"`
}

// JobActionOutput wraps JobAction.
type JobActionOutput struct{ Body JobAction }

// EnqueueRequest describes a job to enqueue.
type EnqueueRequest struct {
	Type           string          `json:"type" minLength:"1" maxLength:"200" pattern:"^[A-Za-z0-9][A-Za-z0-9_.:/-]*$" example:"demo:sleep" doc:"Task type"`
	Payload        json.RawMessage `json:"payload,omitempty" doc:"Any JSON value, handed to the handler as its bytes"`
	TaskID         string          `json:"task_id,omitempty" maxLength:"128" pattern:"^[A-Za-z0-9][A-Za-z0-9._-]*$" doc:"Task id; default a random UUID. 409 if a task with this id exists"`
	MaxRetry       *int            `json:"max_retry,omitempty" minimum:"0" maximum:"1000" doc:"Retries for handler errors (asynq's default 25)"`
	DelaySeconds   float64         `json:"delay_seconds,omitempty" minimum:"0" maximum:"31536000" doc:"Run no sooner than this many seconds from now"`
	TimeoutSeconds float64         `json:"timeout_seconds,omitempty" minimum:"0" maximum:"604800" doc:"Per-attempt timeout; default the pool's task_timeout"`
	UniqueSeconds  float64         `json:"unique_seconds,omitempty" minimum:"0" maximum:"604800" doc:"Refuse (409) a task of the same type and payload in this queue for this long"`
}

// EnqueueInput is the enqueue operation's input.
type EnqueueInput struct {
	QueueParam
	Body EnqueueRequest
}

func (s *server) registerJobs(api huma.API) {
	route(api, accessRead, huma.Operation{
		OperationID: "list-jobs", Method: http.MethodGet, Path: "/api/v1/queues/{queue}/jobs", Tags: []string{"jobs"},
		Summary:     "List a queue's jobs",
		Description: "One page of the queue's jobs in one state: pending, active, scheduled, retry, archived (toxic jobs included, with their reason) or completed.",
		Errors:      []int{http.StatusNotFound, http.StatusUnprocessableEntity},
	}, s.listJobs)
	route(api, accessWrite, s.withBody(huma.Operation{
		OperationID: "enqueue-job", Method: http.MethodPost, Path: "/api/v1/queues/{queue}/jobs", Tags: []string{"jobs"},
		Summary:       "Enqueue a job",
		Description:   "201 with the new job. 404 unknown queue; 422 invalid input (negative delay, payload over the configured size, …); 409 task id or unique key taken.",
		DefaultStatus: http.StatusCreated,
		Errors:        []int{http.StatusNotFound, http.StatusConflict},
	}), s.enqueue)
	route(api, accessRead, huma.Operation{
		OperationID: "get-job", Method: http.MethodGet, Path: "/api/v1/jobs/{queue}/{id}", Tags: []string{"jobs"},
		Summary: "Get a job",
		Errors:  []int{http.StatusNotFound, http.StatusUnprocessableEntity},
	}, s.getJob)
	route(api, accessWrite, huma.Operation{
		OperationID: "retry-job", Method: http.MethodPost, Path: "/api/v1/jobs/{queue}/{id}/retry", Tags: []string{"jobs"},
		Summary:     "Run a job again now",
		Description: "Moves a scheduled, retry or archived job (a toxic one too) to pending. 409 for a pending, active or completed job.",
		Errors:      []int{http.StatusNotFound, http.StatusConflict, http.StatusUnprocessableEntity},
	}, s.retryJob)
	route(api, accessWrite, huma.Operation{
		OperationID: "cancel-job", Method: http.MethodPost, Path: "/api/v1/jobs/{queue}/{id}/cancel", Tags: []string{"jobs"},
		Summary:     "Cancel a job",
		Description: "An active job's handler gets its context cancelled (best effort); a pending, scheduled or retry job is archived so that it does not run (retry brings it back). 409 for an archived or completed job.",
		Errors:      []int{http.StatusNotFound, http.StatusConflict, http.StatusUnprocessableEntity},
	}, s.cancelJob)
	route(api, accessWrite, huma.Operation{
		OperationID: "delete-job", Method: http.MethodDelete, Path: "/api/v1/jobs/{queue}/{id}", Tags: []string{"jobs"},
		Summary:       "Delete a job",
		Description:   "204 once deleted. 409 for an active job (cancel it first).",
		DefaultStatus: http.StatusNoContent,
		Errors:        []int{http.StatusNotFound, http.StatusConflict, http.StatusUnprocessableEntity},
	}, s.deleteJob)
}

func (s *server) listJobs(ctx context.Context, in *ListJobsInput) (*JobsOutput, error) {
	if err := s.knownQueue(in.Queue); err != nil {
		return nil, err
	}
	list := map[string]func(string, ...asynq.ListOption) ([]*asynq.TaskInfo, error){
		"pending": s.insp.ListPendingTasks, "active": s.insp.ListActiveTasks, "scheduled": s.insp.ListScheduledTasks,
		"retry": s.insp.ListRetryTasks, "archived": s.insp.ListArchivedTasks, "completed": s.insp.ListCompletedTasks,
	}[in.State]
	if list == nil {
		return nil, huma.Error422UnprocessableEntity("unknown state " + in.State)
	}
	tasks, err := list(in.Queue, asynq.Page(in.Page), asynq.PageSize(in.PageSize))
	if err != nil && !errors.Is(err, asynq.ErrQueueNotFound) {
		return nil, s.fail(ctx, "list "+in.State+" jobs of "+in.Queue, err)
	}
	out := &JobsOutput{}
	out.Body.Queue, out.Body.State, out.Body.Page, out.Body.PageSize = in.Queue, in.State, in.Page, in.PageSize
	out.Body.Jobs = make([]Job, len(tasks))
	for i, t := range tasks {
		out.Body.Jobs[i] = jobOf(t)
	}
	return out, nil
}

func (s *server) enqueue(ctx context.Context, in *EnqueueInput) (*CreatedJobOutput, error) {
	if err := s.knownQueue(in.Queue); err != nil {
		return nil, err
	}
	b := in.Body
	payload := []byte(b.Payload)
	if string(payload) == "null" {
		payload = nil
	}
	var opts []asynq.Option
	if b.TaskID != "" {
		opts = append(opts, asynq.TaskID(b.TaskID))
	}
	if b.MaxRetry != nil {
		opts = append(opts, asynq.MaxRetry(*b.MaxRetry))
	}
	if b.DelaySeconds > 0 {
		opts = append(opts, asynq.ProcessIn(seconds(b.DelaySeconds)))
	}
	if b.TimeoutSeconds > 0 {
		opts = append(opts, asynq.Timeout(seconds(b.TimeoutSeconds)))
	}
	if b.UniqueSeconds >= 1 {
		opts = append(opts, asynq.Unique(seconds(b.UniqueSeconds)))
	}
	if b.UniqueSeconds > 0 && b.UniqueSeconds < 1 {
		return nil, huma.Error422UnprocessableEntity("unique_seconds must be 0 or at least 1")
	}
	// queue.Client checks the task and announces it (event created).
	info, err := s.jobs.Enqueue(ctx, in.Queue, asynq.NewTask(b.Type, payload), opts...)
	switch {
	case errors.Is(err, queue.ErrPayloadTooLarge), errors.Is(err, queue.ErrNegativeDelay), errors.Is(err, queue.ErrInvalidTask):
		return nil, huma.Error422UnprocessableEntity(err.Error())
	case err != nil:
		return nil, s.fail(ctx, "enqueue to "+in.Queue, err)
	}
	return &CreatedJobOutput{Location: "api/v1/jobs/" + info.Queue + "/" + info.ID, Body: jobOf(info)}, nil
}

func seconds(f float64) time.Duration { return time.Duration(f * float64(time.Second)) }

func jobTopic(q, id string) string { return queue.JobTopic(q, id) }

// task reads a job of a configured queue.
func (s *server) task(ctx context.Context, in *JobParam) (*asynq.TaskInfo, error) {
	if err := s.knownQueue(in.Queue); err != nil {
		return nil, err
	}
	t, err := s.insp.GetTaskInfo(in.Queue, in.ID)
	if errors.Is(err, asynq.ErrQueueNotFound) || errors.Is(err, asynq.ErrTaskNotFound) {
		return nil, huma.Error404NotFound("no job " + in.ID + " in queue " + in.Queue)
	}
	if err != nil {
		return nil, s.fail(ctx, "read job "+in.ID, err)
	}
	return t, nil
}

func (s *server) getJob(ctx context.Context, in *JobParam) (*JobOutput, error) {
	t, err := s.task(ctx, in)
	if err != nil {
		return nil, err
	}
	return &JobOutput{Body: jobOf(t)}, nil
}

// refuse is the 409 of an action the job's state does not allow.
func refuse(action string, t *asynq.TaskInfo) error {
	return huma.Error409Conflict(fmt.Sprintf("cannot %s job %s: it is %s", action, t.ID, t.State))
}

func (s *server) retryJob(ctx context.Context, in *JobParam) (*JobActionOutput, error) {
	t, err := s.task(ctx, in)
	if err != nil {
		return nil, err
	}
	switch t.State {
	case asynq.TaskStateScheduled, asynq.TaskStateRetry, asynq.TaskStateArchived:
	default:
		return nil, refuse("retry", t)
	}
	if err := s.insp.RunTask(in.Queue, in.ID); err != nil {
		return nil, s.fail(ctx, "retry job "+in.ID, err)
	}
	return s.jobActionResult(ctx, in, "retry", "job "+in.ID+" of queue "+in.Queue+" will run now")
}

func (s *server) cancelJob(ctx context.Context, in *JobParam) (*JobActionOutput, error) {
	t, err := s.task(ctx, in)
	if err != nil {
		return nil, err
	}
	switch t.State {
	case asynq.TaskStateActive:
		if err := s.insp.CancelProcessing(in.ID); err != nil {
			return nil, s.fail(ctx, "cancel job "+in.ID, err)
		}
		msg := "cancellation sent to the worker running job " + in.ID
		s.announce(ctx, jobTopic(in.Queue, in.ID), "cancel", in.ID, msg)
		return &JobActionOutput{Body: JobAction{Action: "cancel", Message: msg}}, nil
	case asynq.TaskStatePending, asynq.TaskStateScheduled, asynq.TaskStateRetry:
		if err := s.insp.ArchiveTask(in.Queue, in.ID); err != nil {
			return nil, s.fail(ctx, "cancel job "+in.ID, err)
		}
		return s.jobActionResult(ctx, in, "cancel", "job "+in.ID+" archived: it will not run unless retried")
	}
	return nil, refuse("cancel", t)
}

func (s *server) jobActionResult(ctx context.Context, in *JobParam, action, msg string) (*JobActionOutput, error) {
	s.announce(ctx, jobTopic(in.Queue, in.ID), action, in.ID, msg)
	r := JobAction{Action: action, Message: msg}
	if t, err := s.insp.GetTaskInfo(in.Queue, in.ID); err == nil {
		j := jobOf(t)
		r.Job = &j
	}
	return &JobActionOutput{Body: r}, nil
}

func (s *server) deleteJob(ctx context.Context, in *JobParam) (*struct{}, error) {
	t, err := s.task(ctx, in)
	if err != nil {
		return nil, err
	}
	if t.State == asynq.TaskStateActive {
		return nil, refuse("delete", t)
	}
	if err := s.insp.DeleteTask(in.Queue, in.ID); err != nil {
		return nil, s.fail(ctx, "delete job "+in.ID, err)
	}
	s.announce(ctx, jobTopic(in.Queue, in.ID), "delete", in.ID, "deleted")
	return nil, nil
}
