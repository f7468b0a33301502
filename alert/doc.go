// Package alert POSTs events an operator must hear of (a worker turned
// failed, a host was lost: docs/design.md §10 alerts.webhook) to a webhook, as
// JSON. It never blocks its caller: events wait in a bounded queue served
// by one goroutine, with a timeout per attempt and retries with backoff;
// when the queue is full an event is dropped with a log line.
//
// It knows nothing of Redis or processes; the supervisor calls Notify.
package alert
