// Package queue is Vigil's asynq integration: pause and resume (control.go),
// queue statistics (stats.go), and — used by worker binaries — the worker
// runtime, enqueue helpers, running-task records, fast requeue of a dead
// worker's tasks, toxic jobs and progress.
//
// It is the only package that knows asynq's Redis keys. It must not spawn
// processes or serve HTTP.
package queue
