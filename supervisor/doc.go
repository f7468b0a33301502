// Package supervisor runs pools of worker processes on one host: it spawns
// each pool's command as real child processes, watches them (process exits
// at once, hung heartbeats by deadline), asks package policy what to do
// after a crash, restarts with backoff or marks the worker failed, and
// stops them gracefully. One monitor goroutine owns all of this state;
// everything else talks to it over channels. Each worker has one explicit
// state, and state.go's table says which event is legal in which state;
// a cluster tick is the list of steps in tick.go.
//
// It must not serve HTTP (package server does) nor know asynq's keys
// (package queue does, behind the Recoverer interface).
package supervisor
