// Package server is Vigil's embeddable admin server (DESIGN.md §7): New
// returns an http.Handler with the Huma v2 API (workers, queues, jobs,
// health, session), the OpenAPI spec, and Swagger UI from package web. A
// host program mounts it under any prefix.
//
// It reads state through health.Store, acts on workers through the
// Supervisor interface and on queues and jobs through package queue and
// asynq's Inspector. It must not spawn processes nor build Redis keys of
// its own.
package server
