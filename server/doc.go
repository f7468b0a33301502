// Package server is Vigil's embeddable admin server (docs/design.md §7): New
// returns an http.Handler (a *Server, to Close when done) with the Huma v2
// API (workers, queues, jobs, health, session), the OpenAPI spec, Swagger
// UI and the dashboard from package web, and the live event stream
// (docs/design.md §8). A host program mounts it under any prefix.
//
// The event stream (broker*.go, events*.go): one goroutine per server
// reads the Redis stream vigil:events with a blocking XREAD and fans each
// entry out, through r3labs/sse with one stream per connection, to the
// clients whose topic patterns match; each client first gets a snapshot
// read from Redis, or what it missed (Last-Event-ID). The server also
// announces system:health changes (broker_health.go).
//
// It reads state through health.Store, acts on workers through the
// Supervisor interface and on queues and jobs through package queue and
// asynq's Inspector. It must not spawn processes nor build Redis keys of
// its own.
package server
