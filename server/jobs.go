package server

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

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
	Payload       json.RawMessage `json:"payload,omitempty" doc:"The payload, when it is JSON and shown whole"`
	PayloadBase64 string          `json:"payload_base64,omitempty" doc:"The payload, base64-encoded, when it is not JSON and shown whole"`
	PayloadSize   int             `json:"payload_size" example:"42" doc:"The payload's size in bytes"`
	// A payload over the cap (a list's preview, a detail's max) is shown
	// as its beginning, as text.
	PayloadTruncated bool            `json:"payload_truncated,omitempty" doc:"The payload is longer than this answer shows (lists: a preview; a job's detail: up to its cap): payload_preview holds its beginning"`
	PayloadPreview   string          `json:"payload_preview,omitempty" doc:"The beginning of a truncated payload, as text (bytes that are not UTF-8 replaced)"`
	MaxRetry         int             `json:"max_retry" example:"25" doc:"Retries allowed for handler errors"`
	Retried          int             `json:"retried" example:"0" doc:"Retries so far"`
	LastError        string          `json:"last_error,omitempty" example:"toxic: worker crashed 3 times" doc:"Error of the last failed attempt"`
	LastFailedAt     int64           `json:"last_failed_at,omitempty" doc:"When the last attempt failed (Unix ms)"`
	Crashes          int             `json:"crashes" example:"0" doc:"Workers that died while running it (its crash counter; cleared when it is archived as toxic)"`
	Toxic            bool            `json:"toxic" doc:"Archived because it crashed its workers too often (docs/design.md §6)"`
	ToxicReason      string          `json:"toxic_reason,omitempty" example:"toxic: worker crashed 3 times" doc:"Why it is toxic"`
	TimeoutS         float64         `json:"timeout_seconds,omitempty" doc:"The task's own per-attempt timeout in seconds (asynq gives 1800 to a task enqueued with neither timeout nor deadline)"`
	EffectiveTimeout float64         `json:"effective_timeout_seconds,omitempty" doc:"The per-attempt timeout a worker of this pool applies (job detail only): the task's own, else the pool's task_timeout, capped by max_task_timeout; absent when only the deadline bounds it"`
	TimeoutSource    string          `json:"timeout_source,omitempty" enum:"task,deadline,pool,asynq_default,max_task_timeout" doc:"Where effective_timeout_seconds comes from (job detail only): the task's own timeout or deadline, the pool's task_timeout (the task had asynq's implicit 30 minutes), asynq's 30 minutes, or the pool's max_task_timeout"`
	Deadline         int64           `json:"deadline,omitempty" doc:"Deadline (Unix ms)"`
	NextProcessAt    int64           `json:"next_process_at,omitempty" doc:"When it is due to run (Unix ms; pending: when it was enqueued)"`
	CompletedAt      int64           `json:"completed_at,omitempty" doc:"When it completed (Unix ms)"`
	RetentionS       float64         `json:"retention_seconds,omitempty" doc:"How long asynq keeps it once completed (its Retention; jobs enqueued through Vigil get the pool's retention)"`
	RetainedUntil    int64           `json:"retained_until,omitempty" doc:"Completed: when asynq deletes it, after which the job route answers 404 (Unix ms)"`
	Result           json.RawMessage `json:"result,omitempty" doc:"Completed: what the handler wrote with ResultWriter, when it is JSON and shown whole"`
	ResultBase64     string          `json:"result_base64,omitempty" doc:"Completed: the result, base64-encoded, when it is not JSON and shown whole"`
	ResultSize       int             `json:"result_size,omitempty" doc:"The result's size in bytes"`
	ResultTruncated  bool            `json:"result_truncated,omitempty" doc:"The result is longer than this answer shows"`
	Orphaned         bool            `json:"orphaned,omitempty" doc:"Active, but its worker is gone (asynq recovers it after the lease)"`
	Group            string          `json:"group,omitempty" doc:"The asynq group it was enqueued in (asynq.Group), aggregated by the pool's aggregator"`
	// A job's detail only: what its handler reported (queue.Progress,
	// queue.Stage) and the scratch directory a failure kept.
	Progress     *float64 `json:"progress,omitempty" doc:"The last progress its handler reported, in percent (a job's detail)"`
	Stage        string   `json:"stage,omitempty" example:"source:ready" doc:"The last milestone its handler reported (queue.Stage; a job's detail)"`
	ScratchDir   string   `json:"scratch_dir,omitempty" doc:"The scratch directory a failed run kept on its worker's host (a job's detail; removed by the host's janitor after scratch_max_age)"`
	ScratchBytes int64    `json:"scratch_bytes,omitempty" doc:"Its size in bytes"`
}

// toxicPrefix starts the last error of a task archived as toxic.
const toxicPrefix = "toxic:"

// Caps of a job's last error: in lists, in a job's detail.
const (
	errorPreview = 1 << 10
	errorMax     = 64 << 10
)

// jobOf is the job as the API shows it, its payload whole.
func jobOf(t *asynq.TaskInfo) Job { return jobView(t, len(t.Payload), len(t.LastErr)) }

// listView and detailView are the job as a list and a job's detail show it.
func (s *server) listView(t *asynq.TaskInfo) Job {
	return jobView(t, s.cfg.PayloadPreview, errorPreview)
}

func (s *server) detailView(t *asynq.TaskInfo) Job {
	j := jobView(t, s.cfg.MaxPayloadShown, errorMax)
	d, from := queue.TimeoutOf(t.Timeout, !t.Deadline.IsZero(), s.cfg.TaskTimeouts[t.Queue], s.cfg.MaxTaskTimeouts[t.Queue])
	j.EffectiveTimeout, j.TimeoutSource = d.Seconds(), from
	return j
}

// jobView shows at most payloadCap bytes of the payload and errCap of the
// last error.
func jobView(t *asynq.TaskInfo, payloadCap, errCap int) Job {
	j := Job{
		ID: t.ID, Queue: t.Queue, Type: t.Type, State: t.State.String(), MaxRetry: t.MaxRetry, Retried: t.Retried,
		LastError: clipText(t.LastErr, errCap), LastFailedAt: unixMS(t.LastFailedAt), TimeoutS: t.Timeout.Seconds(),
		Deadline: unixMS(t.Deadline), NextProcessAt: unixMS(t.NextProcessAt), CompletedAt: unixMS(t.CompletedAt),
		Orphaned: t.IsOrphaned, Group: t.Group, PayloadSize: len(t.Payload), RetentionS: t.Retention.Seconds(), ResultSize: len(t.Result),
	}
	if !t.CompletedAt.IsZero() {
		j.RetainedUntil = unixMS(t.CompletedAt.Add(t.Retention))
	}
	switch {
	case len(t.Result) == 0:
	case len(t.Result) > payloadCap:
		j.ResultTruncated = true
	case json.Valid(t.Result):
		j.Result = json.RawMessage(t.Result)
	default:
		j.ResultBase64 = base64.StdEncoding.EncodeToString(t.Result)
	}
	switch {
	case len(t.Payload) == 0:
	case len(t.Payload) > payloadCap:
		j.PayloadTruncated, j.PayloadPreview = true, prefixText(t.Payload, payloadCap)
	case json.Valid(t.Payload):
		j.Payload = json.RawMessage(t.Payload)
	default:
		j.PayloadBase64 = base64.StdEncoding.EncodeToString(t.Payload)
	}
	if t.State == asynq.TaskStateArchived && strings.HasPrefix(t.LastErr, toxicPrefix) {
		j.Toxic, j.ToxicReason = true, clipText(t.LastErr, errCap)
	}
	return j
}

// prefixText is at most n bytes of b from its start, as valid UTF-8 (cut
// at a rune boundary, other bytes replaced).
func prefixText(b []byte, n int) string {
	b = b[:min(n, len(b))]
	for i := 0; i < utf8.UTFMax && len(b) > 0 && !utf8.Valid(b); i++ {
		if r, _ := utf8.DecodeLastRune(b); r == utf8.RuneError {
			b = b[:len(b)-1]
		}
	}
	return strings.ToValidUTF8(string(b), "\uFFFD")
}

// clipText cuts s to n bytes with a marker saying how much was dropped.
func clipText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return prefixText([]byte(s), n) + " … [truncated " + strconv.Itoa(len(s)-n) + " bytes]"
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
	State    string `query:"state" enum:"pending,active,scheduled,retry,archived,completed,aggregating" default:"pending" doc:"Which jobs (archived ones include toxic jobs, with their reason; aggregating: tasks of asynq groups waiting for the aggregator, every group, by group name)"`
	Page     int    `query:"page" minimum:"1" maximum:"100000" default:"1" doc:"Page number, from 1"`
	PageSize int    `query:"page_size" minimum:"1" maximum:"500" default:"50" doc:"Jobs per page"`
}

// JobList is a page of jobs.
type JobList struct {
	Queue    string `json:"queue" example:"tag"`
	State    string `json:"state" example:"pending"`
	Page     int    `json:"page" example:"1"`
	PageSize int    `json:"page_size" example:"50"`
	Jobs     []Job  `json:"jobs" nullable:"false" doc:"The jobs, each payload shown whole up to the preview size, else as its beginning (payload_truncated); the full payload is in the job's detail"`
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
	Type             string          `json:"type" minLength:"1" maxLength:"200" pattern:"^[A-Za-z0-9][A-Za-z0-9_.:/-]*$" example:"demo:sleep" doc:"Task type"`
	Payload          json.RawMessage `json:"payload,omitempty" doc:"Any JSON value, handed to the handler as its bytes"`
	TaskID           string          `json:"task_id,omitempty" maxLength:"128" pattern:"^[A-Za-z0-9][A-Za-z0-9._-]*$" doc:"Task id; default a random UUID. 409 if a task with this id exists"`
	MaxRetry         *int            `json:"max_retry,omitempty" minimum:"0" maximum:"1000" doc:"Retries for handler errors (default: the pool's max_retry, 2 unless configured)"`
	DelaySeconds     float64         `json:"delay_seconds,omitempty" minimum:"0" maximum:"31536000" doc:"Run no sooner than this many seconds from now"`
	TimeoutSeconds   float64         `json:"timeout_seconds,omitempty" minimum:"0" maximum:"604800" doc:"Per-attempt timeout; default the pool's task_timeout"`
	UniqueSeconds    float64         `json:"unique_seconds,omitempty" minimum:"0" maximum:"604800" doc:"Refuse (409) a task of the same type and payload in this queue for this long"`
	RetentionSeconds float64         `json:"retention_seconds,omitempty" minimum:"0" maximum:"31536000" doc:"Keep it this long once completed (asynq's Retention); default the pool's retention"`
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
		Description:   "201 with the new job. 404 unknown queue; 422 invalid input (negative delay, payload over the configured size, …); 409 task id or unique key taken; 503 with Retry-After when durable_enqueue is set and the job did not reach its replicas in time (retry with the task_id the message names: 409 means it was kept).",
		DefaultStatus: http.StatusCreated,
		Errors:        []int{http.StatusNotFound, http.StatusConflict, http.StatusServiceUnavailable},
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
		"aggregating": nil,
	}[in.State]
	if in.State == "aggregating" {
		list = s.insp.ListPendingTasks // not used: aggregatingJobs lists them
	}
	if list == nil {
		return nil, huma.Error422UnprocessableEntity("unknown state " + in.State)
	}
	var tasks []Job
	var err error
	if in.State == "aggregating" {
		tasks, err = s.aggregatingJobs(in.Queue, in.Page, in.PageSize)
	} else {
		tasks, err = s.readJobs(ctx, in.Queue, in.State, in.Page, in.PageSize, list)
	}
	if err != nil && !errors.Is(err, asynq.ErrQueueNotFound) {
		return nil, s.fail(ctx, "list "+in.State+" jobs of "+in.Queue, err)
	}
	out := &JobsOutput{}
	out.Body.Queue, out.Body.State, out.Body.Page, out.Body.PageSize = in.Queue, in.State, in.Page, in.PageSize
	out.Body.Jobs = append(make([]Job, 0, len(tasks)), tasks...)
	if err := s.withCrashes(ctx, in.Queue, out.Body.Jobs); err != nil {
		return nil, s.fail(ctx, "read crash counters of "+in.Queue, err)
	}
	return out, nil
}

// aggregatingJobs is a page of the tasks of q's asynq groups waiting for
// their aggregator, group after group (by name). A group holds at most
// the aggregator's max size, so the tasks read are about page × size.
func (s *server) aggregatingJobs(q string, page, size int) ([]Job, error) {
	groups, err := s.insp.Groups(q)
	if err != nil {
		return nil, err
	}
	slices.SortFunc(groups, func(a, b *asynq.GroupInfo) int { return strings.Compare(a.Group, b.Group) })
	skip, out := (page-1)*size, []Job{}
	for _, g := range groups {
		if skip >= g.Size {
			skip -= g.Size
			continue
		}
		ts, err := s.insp.ListAggregatingTasks(q, g.Group, asynq.PageSize(skip+size-len(out)))
		if err != nil {
			return nil, err
		}
		for _, t := range ts[min(skip, len(ts)):] {
			out = append(out, s.listView(t))
		}
		skip = 0
		if len(out) >= size {
			return out[:size], nil
		}
	}
	return out, nil
}

// withCrashes fills in the jobs' crash counters (one MGET: a queue's
// per-task keys share its slot).
func (s *server) withCrashes(ctx context.Context, q string, jobs []Job) error {
	if len(jobs) == 0 {
		return nil
	}
	keys := make([]string, len(jobs))
	for i, j := range jobs {
		keys[i] = s.store.Keys().JobCrashes(q, j.ID)
	}
	vals, err := s.store.Client().MGet(ctx, keys...).Result()
	if err != nil {
		return err
	}
	for i, v := range vals {
		if str, ok := v.(string); ok {
			jobs[i].Crashes, _ = strconv.Atoi(str)
		}
	}
	return nil
}

// readJobs loads a page of jobs within the read budget: it measures the
// page first (sizes only); a page that fits a quarter of the budget is
// listed at once, a bigger one job by job, each shown as a preview as soon
// as it is read, so that a page of huge payloads never sits in memory.
func (s *server) readJobs(ctx context.Context, q, state string, page, size int, list func(string, ...asynq.ListOption) ([]*asynq.TaskInfo, error)) ([]Job, error) {
	sizes, err := s.cfg.Queue.TaskSizes(ctx, q, state, page, size)
	if err != nil {
		return nil, err
	}
	var total int64
	for _, t := range sizes {
		total += t.Bytes
	}
	var out []Job
	if total <= s.cfg.ReadBudget/4 {
		if err := s.reads.Acquire(ctx, total); err != nil {
			return nil, err
		}
		defer s.reads.Release(total)
		tasks, err := list(q, asynq.Page(page), asynq.PageSize(size))
		for _, t := range tasks {
			out = append(out, s.listView(t))
		}
		return out, err
	}
	for _, sz := range sizes {
		t, err := s.readTask(ctx, q, sz.ID, sz.Bytes)
		switch {
		case errors.Is(err, asynq.ErrTaskNotFound), errors.Is(err, asynq.ErrQueueNotFound):
			continue // gone since the page was measured
		case err != nil:
			return nil, err
		}
		out = append(out, s.listView(t))
	}
	return out, nil
}

// readTask loads one job of size bytes within the read budget.
func (s *server) readTask(ctx context.Context, q, id string, size int64) (*asynq.TaskInfo, error) {
	n := min(size, s.cfg.ReadBudget)
	if err := s.reads.Acquire(ctx, n); err != nil {
		return nil, err
	}
	defer s.reads.Release(n)
	return s.insp.GetTaskInfo(q, id)
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
	if b.RetentionSeconds > 0 {
		opts = append(opts, asynq.Retention(seconds(b.RetentionSeconds)))
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
	case errors.Is(err, queue.ErrNotDurable):
		// durable_enqueue: written, but a failover now could lose it. The
		// client retries with the same task_id: 409 if it was kept.
		s.log.WarnContext(ctx, "enqueue not durable: answered 503", "queue", in.Queue, "task", info.ID, "err", err)
		return nil, huma.ErrorWithHeaders(huma.Error503ServiceUnavailable(
			"job "+info.ID+" was written but did not reach the replicas durable_enqueue asks for in time ("+publicError(err)+
				"); retry with task_id "+info.ID+": 409 means it was kept"), http.Header{"Retry-After": {"1"}})
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
	size, err := s.cfg.Queue.TaskSizeOf(ctx, in.Queue, in.ID)
	if err != nil {
		return nil, s.fail(ctx, "read job "+in.ID, err)
	}
	t, err := s.readTask(ctx, in.Queue, in.ID, size)
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
	j := []Job{s.detailView(t)}
	if err := s.withCrashes(ctx, in.Queue, j); err != nil {
		return nil, s.fail(ctx, "read the crash counter of job "+in.ID, err)
	}
	if err := s.withRunInfo(ctx, in.Queue, &j[0]); err != nil {
		return nil, s.fail(ctx, "read the progress of job "+in.ID, err)
	}
	return &JobOutput{Body: j[0]}, nil
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
	if t, err := s.task(ctx, in); err == nil {
		j := s.detailView(t)
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
