package server

import (
	"context"
	"net/http"
	"slices"

	"github.com/danielgtaylor/huma/v2"
)

// APIVersion is the admin API's version in the spec.
const APIVersion = "1.0.0"

const apiDescription = `Vigil's admin API: the supervised workers, their queues and jobs.

**Auth.** A bearer token (config ` + "`token`" + ` / ` + "`VIGIL_TOKEN`" + ` / ` + "`VIGIL_TOKEN_FILE`" + `) is required on
every mutating operation and, with ` + "`auth_reads: true`" + `, on reads. Missing or wrong: 401; after
too many wrong tokens from one client, 429 with Retry-After. ` + "`read_only: true`" + ` answers 403 to
every mutation. With no token configured, a mutation (and the session route) is accepted only
from this host: the TCP peer is loopback, the Host header names a loopback address, ` + "`localhost`" + `
or the listen address, and no ` + "`Forwarded`" + `, ` + "`X-Forwarded-For`" + ` or ` + "`X-Real-IP`" + ` header is present;
otherwise 403 (set a token). Forwarding headers are believed only from ` + "`trusted_proxies`" + `.
The dashboard exchanges the token for an HttpOnly, SameSite=Strict session cookie
(` + "`POST /api/v1/session`" + `; Secure over TLS or behind a trusted proxy that says https), accepted
like the header until it expires or ` + "`DELETE /api/v1/session`" + ` ends it; a cookie-authenticated
mutation needs ` + "`Sec-Fetch-Site: same-origin`" + ` or an ` + "`Origin`" + ` naming this server.

**Errors** are RFC 9457 problem details (` + "`application/problem+json`" + `).

**Actions** are synchronous: they answer once the new state is written. They take no request
body; their options are query parameters.`

// tags group the operations in the spec and in Swagger UI.
var tags = []*huma.Tag{
	{Name: "health", Description: "Liveness, readiness and the cluster's health."},
	{Name: "workers", Description: "Supervised worker processes and the operator's actions on them."},
	{Name: "queues", Description: "Queue statistics and pause/resume."},
	{Name: "jobs", Description: "Enqueue, look up, retry, cancel and delete jobs."},
	{Name: "cluster", Description: "Hosts, pool sizes, drain and rolling restarts."},
	{Name: "schedules", Description: "Periodic tasks: enqueued by the leader, each tick exactly once across leader changes."},
	{Name: "session", Description: "The dashboard's session cookie."},
	{Name: "events", Description: "Live events (server-sent events) of the whole cluster."},
}

// route registers op guarded by a, with its security requirement and the
// auth errors it can answer.
func route[I, O any](api huma.API, a access, op huma.Operation, h func(context.Context, *I) (*O, error)) {
	switch a {
	case accessOpen:
		op.Security = securityOpen
	case accessSession:
		op.Security = securityOpen
		op.Errors = append(op.Errors, http.StatusForbidden, http.StatusTooManyRequests)
	case accessRead:
		op.Security = securityRead
		op.Errors = append(op.Errors, http.StatusUnauthorized, http.StatusForbidden, http.StatusTooManyRequests)
	case accessWrite:
		op.Security = securityWrite
		op.Errors = append(op.Errors, http.StatusUnauthorized, http.StatusForbidden, http.StatusTooManyRequests)
	}
	slices.Sort(op.Errors)
	op.Errors = slices.Compact(op.Errors)
	op.Metadata = map[string]any{metaAccess: a}
	huma.Register(api, op, h)
}

// register adds every operation of the API.
func (s *server) register(api huma.API) {
	s.registerHealth(api)
	s.registerWorkers(api)
	s.registerWorkerPause(api)
	s.registerWorkerRemove(api)
	s.registerQueues(api)
	s.registerJobs(api)
	s.registerSession(api)
	s.registerCluster(api)
	s.registerSchedules(api)
	s.registerEvents(api)
	s.registerHistory(api)
}

// withBody caps op's request body at max_body.
func (s *server) withBody(op huma.Operation) huma.Operation {
	// Huma answers 413 when it reads MaxBodyBytes bytes, so allow one more
	// than the cap.
	op.MaxBodyBytes = s.cfg.MaxBody + 1
	op.Errors = append(op.Errors, http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusUnsupportedMediaType, http.StatusUnprocessableEntity)
	return op
}
