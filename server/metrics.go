package server

import (
	"net/http"
)

// metricsHandler serves GET /metrics (docs/design.md §7): Prometheus's text
// format from Config.Metrics's registry. It is a plain handler, not an
// operation of the OpenAPI spec (its body is not JSON); it is a read, so
// auth_reads puts it behind the token like the API's reads (Prometheus
// sends it with `authorization: {credentials: …}`).
func (s *server) metricsHandler() http.Handler {
	h := s.cfg.Metrics.Handler()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if f := s.authorize(r, accessRead); f != nil {
			s.refuse(w, f)
			return
		}
		h.ServeHTTP(w, r)
	})
}
