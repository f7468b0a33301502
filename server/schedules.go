package server

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/vigil-dev/vigil/schedule"
)

// ScheduleParam names a schedule in the path.
type ScheduleParam struct {
	Name string `path:"name" maxLength:"63" pattern:"^[a-z0-9][a-z0-9_-]{0,62}$" example:"nightly" doc:"Schedule name"`
}

// ScheduleRequest is what an operator writes of a schedule.
type ScheduleRequest struct {
	Name  string `json:"name,omitempty" maxLength:"63" example:"nightly" doc:"Unique name, ^[a-z0-9][a-z0-9_-]{0,62}$ (required to create; on an update, absent or the same)"`
	Spec  string `json:"spec" minLength:"1" maxLength:"200" example:"CRON_TZ=Europe/Paris 0 2 * * *" doc:"When it ticks: a cron spec (5 fields, or 6 with seconds first), a descriptor (@hourly, @daily, …) or @every <duration>, with an optional CRON_TZ=<IANA zone> prefix (default UTC). Faster than once a second only with scheduler.allow_subsecond"`
	Queue string `json:"queue" maxLength:"63" example:"reports" doc:"Queue the tasks go to: one of the pools' queues"`
	Type  string `json:"type" maxLength:"200" example:"report:daily" doc:"Task type"`
	// Payload is any JSON value, handed to the handler as its bytes.
	Payload          json.RawMessage `json:"payload,omitempty" doc:"Any JSON value, handed to the handler as its bytes (at most the job payload limit)"`
	MaxRetry         *int            `json:"max_retry,omitempty" minimum:"0" maximum:"1000" doc:"Retries for handler errors (asynq's default 25)"`
	TimeoutSeconds   int64           `json:"timeout_seconds,omitempty" minimum:"0" maximum:"604800" doc:"Per-attempt timeout; default the pool's task_timeout"`
	RetentionSeconds int64           `json:"retention_seconds,omitempty" minimum:"0" maximum:"604800" doc:"How long a completed task is kept"`
	UniqueSeconds    int64           `json:"unique_seconds,omitempty" minimum:"0" maximum:"604800" doc:"asynq's Unique option: while a task of this schedule (same type and payload) holds the lock, a tick enqueues nothing (result duplicate)"`
	CatchUp          string          `json:"catch_up,omitempty" enum:"none,last,all" doc:"What a leader does with missed ticks: none skips them, last fires the latest once (default), all fires each"`
}

// Schedule is a schedule and its state.
type Schedule struct {
	ScheduleRequest
	Source  string   `json:"source" enum:"config,api" doc:"Where it was defined: a host's configuration file (replaced when a host starts with a different set) or the API"`
	Paused  bool     `json:"paused"`
	NextMS  int64    `json:"next_fire,omitempty" doc:"Next tick, Unix ms (absent while paused)"`
	LastMS  int64    `json:"last_fire,omitempty" doc:"Last tick that enqueued a task, Unix ms"`
	AtMS    int64    `json:"last_fired_at,omitempty" doc:"When the last task (of a tick or a trigger) was enqueued, Unix ms"`
	TickMS  int64    `json:"last_tick,omitempty" doc:"Last tick decided (enqueued or skipped by its catch-up policy), Unix ms; no tick at or before it is ever enqueued"`
	Task    string   `json:"last_task,omitempty" doc:"Id of the last task enqueued"`
	Tasks   []string `json:"last_tasks" nullable:"false" doc:"Ids of the last tasks enqueued, newest first (up to 10)"`
	Fires   int64    `json:"fires" doc:"Tasks enqueued (ticks and triggers)"`
	Skipped int64    `json:"skipped" doc:"Ticks skipped by the catch-up policy or the unique option"`
	SinceMS int64    `json:"since" doc:"Its ticks are those after this (created, resumed, spec changed), Unix ms"`
	Created int64    `json:"created_at" doc:"Unix ms"`
	Updated int64    `json:"updated_at" doc:"Unix ms"`
}

// ScheduleList lists the schedules.
type ScheduleList struct {
	Schedules []Schedule `json:"schedules" nullable:"false" doc:"Every schedule, by name"`
}

// ScheduleOutput wraps a Schedule.
type ScheduleOutput struct{ Body Schedule }

// CreatedScheduleOutput answers a create.
type CreatedScheduleOutput struct {
	Location string `header:"Location" doc:"The new schedule's URL, relative to the API root"`
	Body     Schedule
}

// ScheduleAction answers pause, resume and trigger.
type ScheduleAction struct {
	Action   string   `json:"action" enum:"pause,resume,trigger" example:"trigger"`
	Changed  bool     `json:"changed" doc:"false for a pause or resume that found it so already"`
	TaskID   string   `json:"task_id,omitempty" doc:"trigger: the task enqueued"`
	Message  string   `json:"message" example:"schedule nightly triggered: task sched.nightly.manual.20261124T101500.123Z.3fa2b1"`
	Schedule Schedule `json:"schedule" doc:"The schedule after the action"`
}

// ScheduleActionOutput wraps ScheduleAction.
type ScheduleActionOutput struct{ Body ScheduleAction }

// CreateScheduleInput is the create operation's input.
type CreateScheduleInput struct{ Body ScheduleRequest }

// UpdateScheduleInput is the update operation's input.
type UpdateScheduleInput struct {
	ScheduleParam
	Body ScheduleRequest
}

func (s *server) registerSchedules(api huma.API) {
	tag := []string{"schedules"}
	route(api, accessRead, huma.Operation{
		OperationID: "list-schedules", Method: http.MethodGet, Path: "/api/v1/schedules", Tags: tag,
		Summary:     "List schedules",
		Description: "Every periodic task of the cluster with its next and last fire and its last task ids. Only the leader fires them; each tick is enqueued at most once (docs/periodic-tasks.md).",
	}, s.listSchedules)
	route(api, accessRead, huma.Operation{
		OperationID: "get-schedule", Method: http.MethodGet, Path: "/api/v1/schedules/{name}", Tags: tag,
		Summary: "Get a schedule",
		Errors:  []int{http.StatusNotFound, http.StatusUnprocessableEntity},
	}, s.getSchedule)
	route(api, accessWrite, s.withBody(huma.Operation{
		OperationID: "create-schedule", Method: http.MethodPost, Path: "/api/v1/schedules", Tags: tag,
		Summary:       "Create a schedule",
		Description:   "201 with the schedule; its ticks start now. 422 names the bad field: an invalid spec or time zone, a queue no pool consumes, a payload over the size limit, a name taken, a schedule faster than once a second.",
		DefaultStatus: http.StatusCreated,
	}), s.createSchedule)
	route(api, accessWrite, s.withBody(huma.Operation{
		OperationID: "update-schedule", Method: http.MethodPut, Path: "/api/v1/schedules/{name}", Tags: tag,
		Summary:     "Replace a schedule's definition",
		Description: "A new spec ticks from now on; with the same spec, the ticks not yet decided fire with the new definition. Moving it to another queue keeps its state (no tick fires twice). 422 as for a create; 404 unknown.",
		Errors:      []int{http.StatusNotFound},
	}), s.updateSchedule)
	route(api, accessWrite, huma.Operation{
		OperationID: "delete-schedule", Method: http.MethodDelete, Path: "/api/v1/schedules/{name}", Tags: tag,
		Summary:       "Delete a schedule",
		Description:   "204 once deleted; its tasks stay in their queue.",
		DefaultStatus: http.StatusNoContent,
		Errors:        []int{http.StatusNotFound, http.StatusUnprocessableEntity},
	}, s.deleteSchedule)
	for _, a := range []struct{ action, summary, desc string }{
		{"pause", "Pause a schedule", "A paused schedule fires no tick; its ticks while paused are never fired. 200 also when it was paused."},
		{"resume", "Resume a schedule", "It fires the ticks after the resume. 200 also when it was not paused."},
		{"trigger", "Run a schedule now", "Enqueues one task of the schedule at once (paused or not), with an id of its own; no tick is decided by it. 409 while its unique option's lock is held."},
	} {
		route(api, accessWrite, huma.Operation{
			OperationID: a.action + "-schedule", Method: http.MethodPost, Path: "/api/v1/schedules/{name}/" + a.action, Tags: tag,
			Summary: a.summary, Description: a.desc,
			Errors: []int{http.StatusNotFound, http.StatusConflict, http.StatusUnprocessableEntity},
		}, func(ctx context.Context, in *ScheduleParam) (*ScheduleActionOutput, error) {
			return s.scheduleAction(ctx, a.action, in.Name)
		})
	}
}

func (s *server) listSchedules(ctx context.Context, _ *struct{}) (*struct{ Body ScheduleList }, error) {
	vs, err := s.schedules.List(ctx)
	if err != nil {
		return nil, s.scheduleFail(ctx, "list schedules", err)
	}
	out := &struct{ Body ScheduleList }{}
	out.Body.Schedules = make([]Schedule, 0, len(vs))
	for _, v := range vs {
		out.Body.Schedules = append(out.Body.Schedules, scheduleOf(v))
	}
	return out, nil
}

func (s *server) getSchedule(ctx context.Context, in *ScheduleParam) (*ScheduleOutput, error) {
	v, err := s.schedules.Get(ctx, in.Name)
	if err != nil {
		return nil, s.scheduleFail(ctx, "read schedule "+in.Name, err)
	}
	return &ScheduleOutput{Body: scheduleOf(v)}, nil
}

func (s *server) createSchedule(ctx context.Context, in *CreateScheduleInput) (*CreatedScheduleOutput, error) {
	v, err := s.schedules.Create(ctx, definitionOf(in.Body))
	if err != nil {
		return nil, s.scheduleFail(ctx, "create schedule", err)
	}
	s.announce(ctx, schedule.Topic(v.Name), "create_schedule", v.Name, "")
	return &CreatedScheduleOutput{Location: "api/v1/schedules/" + v.Name, Body: scheduleOf(v)}, nil
}

func (s *server) updateSchedule(ctx context.Context, in *UpdateScheduleInput) (*ScheduleOutput, error) {
	v, err := s.schedules.Update(ctx, in.Name, definitionOf(in.Body))
	if err != nil {
		return nil, s.scheduleFail(ctx, "update schedule "+in.Name, err)
	}
	s.announce(ctx, schedule.Topic(v.Name), "update_schedule", v.Name, "")
	return &ScheduleOutput{Body: scheduleOf(v)}, nil
}

func (s *server) deleteSchedule(ctx context.Context, in *ScheduleParam) (*struct{}, error) {
	if err := s.schedules.Delete(ctx, in.Name); err != nil {
		return nil, s.scheduleFail(ctx, "delete schedule "+in.Name, err)
	}
	s.announce(ctx, schedule.Topic(in.Name), "delete_schedule", in.Name, "")
	return nil, nil
}

func (s *server) scheduleAction(ctx context.Context, action, name string) (*ScheduleActionOutput, error) {
	var (
		v       schedule.View
		changed = true
		id      string
		err     error
		msg     string
	)
	switch action {
	case "pause", "resume":
		v, changed, err = s.schedules.SetPaused(ctx, name, action == "pause")
		msg = "schedule " + name + " " + action + "d"
		if !changed {
			msg = "schedule " + name + " already " + map[string]string{"pause": "paused", "resume": "running"}[action]
		}
	default:
		id, v, err = s.schedules.Trigger(ctx, name)
		msg = "schedule " + name + " triggered: task " + id
	}
	if err != nil {
		return nil, s.scheduleFail(ctx, action+" schedule "+name, err)
	}
	if changed {
		s.announce(ctx, schedule.Topic(name), action+"_schedule", name, id)
	}
	return &ScheduleActionOutput{Body: ScheduleAction{Action: action, Changed: changed, TaskID: id, Message: msg, Schedule: scheduleOf(v)}}, nil
}

// scheduleFail answers a refused field with 422 naming it (body.<field>),
// an unknown schedule with 404, a held uniqueness lock with 409.
func (s *server) scheduleFail(ctx context.Context, what string, err error) error {
	var fe *schedule.FieldError
	switch {
	case errors.As(err, &fe):
		return huma.Error422UnprocessableEntity(err.Error(), &huma.ErrorDetail{Location: "body." + fe.Field, Message: fe.Err.Error(), Value: fe.Value})
	case errors.Is(err, schedule.ErrNotFound):
		return huma.Error404NotFound(err.Error())
	case errors.Is(err, schedule.ErrUniqueLocked):
		return huma.Error409Conflict(err.Error())
	}
	return s.fail(ctx, what, err)
}

func definitionOf(r ScheduleRequest) schedule.Definition {
	return schedule.Definition{Name: r.Name, Spec: r.Spec, Queue: r.Queue, Type: r.Type, Payload: r.Payload, MaxRetry: r.MaxRetry,
		Timeout: time.Duration(r.TimeoutSeconds) * time.Second, Retention: time.Duration(r.RetentionSeconds) * time.Second,
		Unique: time.Duration(r.UniqueSeconds) * time.Second, CatchUp: schedule.CatchUp(r.CatchUp)}
}

func scheduleOf(v schedule.View) Schedule {
	ms := func(t time.Time) int64 {
		if t.IsZero() {
			return 0
		}
		return t.UnixMilli()
	}
	out := Schedule{
		ScheduleRequest: ScheduleRequest{Name: v.Name, Spec: v.Spec, Queue: v.Queue, Type: v.Type, Payload: v.Payload, MaxRetry: v.MaxRetry,
			TimeoutSeconds: int64(v.Timeout / time.Second), RetentionSeconds: int64(v.Retention / time.Second),
			UniqueSeconds: int64(v.Unique / time.Second), CatchUp: string(v.CatchUp)},
		Source: v.Source, Paused: v.Paused, NextMS: ms(v.Next), LastMS: ms(v.LastFired), AtMS: ms(v.LastFiredAt), TickMS: ms(v.LastTick),
		Task: v.LastTask, Tasks: v.Tasks, Fires: v.Fires, Skipped: v.Skipped, SinceMS: ms(v.Since), Created: ms(v.CreatedAt), Updated: ms(v.UpdatedAt),
	}
	if out.Tasks == nil {
		out.Tasks = []string{}
	}
	return out
}
