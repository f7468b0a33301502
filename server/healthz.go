package server

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/vigil-dev/vigil/health"
)

// Overall health (docs/design.md §7).
const (
	StatusHealthy  = "healthy"
	StatusDegraded = "degraded"
	StatusError    = "error"
)

// Liveness is /livez's answer.
type Liveness struct {
	Status string `json:"status" example:"ok" doc:"Always ok while the process serves"`
}

// LiveOutput wraps Liveness.
type LiveOutput struct{ Body Liveness }

// Readiness is /readyz's answer.
type Readiness struct {
	Status     string  `json:"status" example:"ready" doc:"ready when Redis answered within 1 s"`
	RedisRTTMS float64 `json:"redis_rtt_ms" example:"0.12" doc:"Round-trip time of a Redis PING, in milliseconds"`
}

// ReadyOutput wraps Readiness.
type ReadyOutput struct{ Body Readiness }

// HealthReport is the cluster's health.
type HealthReport struct {
	Status     string         `json:"status" enum:"healthy,degraded,error" example:"degraded" doc:"healthy, degraded (some workers failed or are restarting, or a pool has no healthy worker) or error (Redis does not answer)"`
	Reasons    []string       `json:"reasons" nullable:"false" example:"[\"1 worker failed: worker:calibration:4\"]" doc:"Why the status is not healthy; empty when healthy"`
	RedisRTTMS float64        `json:"redis_rtt_ms" example:"0.12" doc:"Round-trip time of a Redis PING in milliseconds; 0 when Redis did not answer"`
	Components int            `json:"components" example:"17" doc:"Number of known components"`
	Counts     map[string]int `json:"counts" example:"{\"healthy\":16,\"failed\":1}" doc:"Number of components per status"`
	CheckedAt  int64          `json:"checked_at" example:"1790000000000" doc:"When this report was made (Unix ms)"`
}

// HealthOutput wraps HealthReport.
type HealthOutput struct{ Body HealthReport }

func (s *server) registerHealth(api huma.API) {
	route(api, accessOpen, huma.Operation{
		OperationID: "livez", Method: http.MethodGet, Path: "/livez", Tags: []string{"health"},
		Summary:     "Liveness",
		Description: "200 while the process serves.",
	}, s.livez)
	route(api, accessOpen, huma.Operation{
		OperationID: "readyz", Method: http.MethodGet, Path: "/readyz", Tags: []string{"health"},
		Summary:     "Readiness",
		Description: "200 when Redis answers a PING within 1 s, else 503.",
		Errors:      []int{http.StatusServiceUnavailable},
	}, s.readyz)
	route(api, accessRead, huma.Operation{
		OperationID: "get-health", Method: http.MethodGet, Path: "/api/v1/health", Tags: []string{"health"},
		Summary:     "Cluster health",
		Description: "Always 200: the status (healthy, degraded or error), its reasons, the Redis round-trip time and the number of components per status.",
	}, s.getHealth)
}

func (s *server) livez(context.Context, *struct{}) (*LiveOutput, error) {
	out := &LiveOutput{}
	out.Body.Status = "ok"
	return out, nil
}

// ping measures a Redis round trip, bounded by ReadyTimeout.
func (s *server) ping(ctx context.Context) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, ReadyTimeout)
	defer cancel()
	start := time.Now()
	err := s.store.Client().Ping(ctx).Err()
	return time.Since(start), err
}

func (s *server) readyz(ctx context.Context, _ *struct{}) (*ReadyOutput, error) {
	rtt, err := s.ping(ctx)
	if err != nil {
		s.log.DebugContext(ctx, "readyz: redis does not answer", "err", err)
		return nil, huma.Error503ServiceUnavailable("redis does not answer within 1s: " + publicError(err))
	}
	out := &ReadyOutput{}
	out.Body.Status, out.Body.RedisRTTMS = "ready", ms(rtt)
	return out, nil
}

func (s *server) getHealth(ctx context.Context, _ *struct{}) (*HealthOutput, error) {
	return &HealthOutput{Body: s.healthReport(ctx)}, nil
}

// healthReport computes the cluster's health (also the payload of the
// system:health events).
func (s *server) healthReport(ctx context.Context) HealthReport {
	r := HealthReport{Status: StatusHealthy, Reasons: []string{}, Counts: map[string]int{}, CheckedAt: s.cfg.Clock.Now().UnixMilli()}
	for _, st := range health.Statuses {
		r.Counts[string(st)] = 0
	}
	rtt, err := s.ping(ctx)
	if err != nil {
		r.Status, r.Reasons = StatusError, []string{"redis does not answer within 1s: " + publicError(err)}
		return r
	}
	r.RedisRTTMS = ms(rtt)
	cs, err := s.store.List(ctx)
	if err != nil {
		r.Status, r.Reasons = StatusError, []string{"read components: " + publicError(err)}
		return r
	}
	r.Components = len(cs)
	byStatus := map[health.Status][]string{}
	healthyPerQueue := map[string]int{}
	queues := map[string]bool{}
	for _, c := range cs {
		r.Counts[string(c.Status)]++
		byStatus[c.Status] = append(byStatus[c.Status], c.ID.String())
		queues[c.ID.Queue] = true
		if c.Status == health.StatusHealthy {
			healthyPerQueue[c.ID.Queue]++
		}
	}
	for _, st := range []health.Status{health.StatusFailed, health.StatusCrashed} {
		if ids := byStatus[st]; len(ids) > 0 {
			verb := map[health.Status]string{health.StatusFailed: "failed (needs a reset)", health.StatusCrashed: "crashed (restarting)"}[st]
			r.Reasons = append(r.Reasons, fmt.Sprintf("%d %s %s: %s", len(ids), plural(len(ids), "worker"), verb, list(ids, 10)))
		}
	}
	for _, q := range s.cfg.Queues {
		if queues[q] && healthyPerQueue[q] == 0 {
			r.Reasons = append(r.Reasons, fmt.Sprintf("queue %s has no healthy worker", q))
		}
	}
	hosts, err := s.store.Hosts(ctx)
	if err != nil {
		r.Status, r.Reasons = StatusError, []string{"read hosts: " + publicError(err)}
		return r
	}
	for _, h := range hosts {
		if !h.Alive {
			r.Reasons = append(r.Reasons, fmt.Sprintf("host %s lost (last seen %s)", h.ID, h.SeenAt.UTC().Format(time.RFC3339)))
		}
	}
	if len(r.Reasons) > 0 {
		r.Status = StatusDegraded
	}
	return r
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func plural(n int, s string) string {
	if n == 1 {
		return s
	}
	return s + "s"
}

func list(ids []string, max int) string {
	if len(ids) <= max {
		return strings.Join(ids, ", ")
	}
	return strings.Join(ids[:max], ", ") + fmt.Sprintf(" and %d more", len(ids)-max)
}
