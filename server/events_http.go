package server

import (
	"net/http"
)

// eventsPath is the route of the event stream.
const eventsPath = "/api/v1/events"

// maxLastEventID bounds the Last-Event-ID header and query parameter.
const maxLastEventID = 64

// serveEvents takes GET /api/v1/events before the mux and Huma, with the
// same auth, parameters and errors as the operation in the spec (which
// documents it, and would answer the same). Each connection's goroutine
// keeps its stack for as long as the stream lasts: through Huma's layers it
// grows to 32 KiB, here it stays small.
func (s *server) serveEvents(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != eventsPath || r.Method != http.MethodGet {
			next.ServeHTTP(w, r)
			return
		}
		if f := s.authorize(r, accessRead); f != nil {
			s.refuse(w, f)
			return
		}
		q := r.URL.Query()
		last := r.Header.Get("Last-Event-ID")
		if last == "" {
			last = q.Get("last_event_id")
		}
		if len(last) > maxLastEventID {
			writeProblem(w, http.StatusUnprocessableEntity, "Last-Event-ID is longer than 64 bytes")
			return
		}
		sub, err := parseSubscription(q["topic"])
		if err != nil {
			writeProblem(w, http.StatusUnprocessableEntity, err.Error())
			return
		}
		addr := s.clientAddr(r)
		if status, why := s.broker.acquire(addr); status != 0 {
			writeProblem(w, status, why)
			return
		}
		s.broker.serve(w, r, sub, last, addr)
	})
}
