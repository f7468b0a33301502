// Package schedule owns periodic tasks (docs/design.md §11, docs/periodic-tasks.md):
// schedules kept in Redis (Store: create, update, delete, pause,
// trigger, and the ones of a configuration file), and the Scheduler that
// fires them on the leader only.
//
// A tick is enqueued at most once whoever fires it and however often: its
// task id derives from the schedule and the tick's instant, and one script
// writes the task into asynq's keys (as asynq's own enqueue does) and
// records the tick as the schedule's last decided one; a tick at or before
// that is never enqueued again, even after its task completed and was
// deleted. A new leader decides the ticks it finds missed by the
// schedule's catch-up policy (none, last, all).
//
// It writes asynq's task, pending, uniqueness, scheduler-entry and
// scheduler-history keys the way asynq v0.26.0 does (TestFirePinned checks
// that against asynq itself), and Vigil's schedule keys of health.Keys. It
// knows nothing of processes or of how leadership is won: the supervisor
// tells it (Scheduler.Leading).
package schedule
