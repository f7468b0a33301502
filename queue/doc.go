// Package queue is Vigil's asynq integration (DESIGN.md §6, §9).
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
// It is the only package that knows asynq's Redis keys and scripts
// (asynqkeys.go, pinned to AsynqVersion; dequeue.go wraps asynq's dequeue
// on the worker's own Redis client). It must not spawn processes or serve
// HTTP.
package queue
