// Package metrics is Vigil's Prometheus instrumentation: one registry that
// an embedding program can share (Config.Registry), the counters the
// supervisor and the admin server update as things happen, and collectors
// that read the rest from Redis at scrape time. Handler serves it (the
// admin server mounts it at GET /metrics, a plain handler outside the
// OpenAPI spec).
//
// What one host reports:
//   - what it saw happen (crashes, restarts, failed workers, crash-detection
//     latency, recovered jobs, lost hosts, SSE clients and events, alerts):
//     its own counters, since it started;
//   - its workers (components whose record names this host): their status,
//     and the counters the worker processes report about themselves into
//     Redis (heartbeats, jobs, retries by code, in-flight jobs, …; see
//     queue.WorkerStats), so that summing over hosts counts each once;
//   - queue sizes and latency from asynq's inspector: cluster-wide, the same
//     on every host (aggregate them with max, not sum).
//
// It must not touch processes; it only reads Redis.
package metrics
