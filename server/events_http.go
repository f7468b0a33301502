package server

import (
	"net/http"
)

// eventsPath is the route of the event stream.
const eventsPath = "/api/v1/events"

// maxLastEventID bounds the Last-Event-ID header and query parameter.
const maxLastEventID = 64

// openEvents starts GET /api/v1/events for Server.ServeHTTP, with the same
// auth, parameters and errors as the operation in the spec (which
// documents it, and would answer the same), and returns the client to
// serve through r3labs/sse; nil when it has answered already. Huma's
// layers are not under the stream: through them the connection's stack
// would grow to 32 KiB and stay so for as long as the stream lasts.
func (s *server) openEvents(w http.ResponseWriter, r *http.Request) *client {
	if f := s.authorize(r, accessRead); f != nil {
		s.refuse(w, f)
		return nil
	}
	q := r.URL.Query()
	last := r.Header.Get("Last-Event-ID")
	if last == "" {
		last = q.Get("last_event_id")
	}
	if len(last) > maxLastEventID {
		writeProblem(w, http.StatusUnprocessableEntity, "Last-Event-ID is longer than 64 bytes")
		return nil
	}
	sub, err := parseSubscription(q["topic"])
	if err != nil {
		writeProblem(w, http.StatusUnprocessableEntity, err.Error())
		return nil
	}
	addr := s.clientAddr(r)
	if status, why := s.broker.acquire(addr); status != 0 {
		writeProblem(w, status, why)
		return nil
	}
	e, err := s.broker.sharedEnds(r.Context())
	return s.broker.open(w, r, sub, last, addr, &e, err)
}
