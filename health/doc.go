// Package health is Vigil's Redis health store: the key layout (keys.go), the
// component records and their status machine, restart history, the worker
// heartbeat script and the worker-side Heartbeater, and the exit codes.
//
// It knows nothing of processes or HTTP: it reads and writes Redis, always
// through the key functions of Keys and, for anything that must not race,
// through the Lua scripts of scripts.go.
package health
