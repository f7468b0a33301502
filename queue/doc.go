// Package queue is Vigil's asynq integration (docs/design.md §6, §9).
//
// For worker binaries: RunWorker (worker.go) runs a pool's asynq server
// with the heartbeater and the middleware (middleware.go) that records
// running tasks, durations, progress (Progress, throttled) and crash
// accounting (toxic tasks), and shuts down gracefully; ScratchDir gives a
// task a directory. For producers and the admin API: Client.Enqueue
// (enqueue.go), pause and resume (control.go), statistics (stats.go).
// For the supervisor: Recoverer (recover.go) puts a dead worker's tasks
// straight back to pending.
//
// Across Redis faults (docs/design.md §11): the worker's Redis hook (hook.go)
// takes over asynq's dequeue (dequeue.go, sent once, never retried), its
// outcome writes (outcome.go: one Redis does not take is kept, kept.go,
// and written later under the owner guard) and its lease calls
// (leases.go). A link state machine (link.go, settle.go) stops dequeuing
// while Redis is away and, once it answers, writes what was kept and
// requeues the tasks a lost reply stranded under this process.
//
// It is the only package that knows asynq's Redis keys and scripts
// (asynqkeys.go and asynqscripts.go, pinned to AsynqVersion). It must not
// spawn processes or serve HTTP.
package queue
