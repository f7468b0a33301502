package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"regexp"
	"strings"

	"github.com/danielgtaylor/huma/v2"
	"github.com/hibiken/asynq"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/queue"
	"github.com/vigil-dev/vigil/supervisor"
)

// errUnknownQueue is a queue no pool of the configuration consumes.
var errUnknownQueue = queue.ErrUnknownQueue

func unknownComponent(id health.ComponentID) error {
	return fmt.Errorf("%s: %w", id, supervisor.ErrUnknownComponent)
}

// fail turns err into a problem detail: 404 for what does not exist, 409
// for what the status machine or the job's state forbids or a component no
// live host holds, 422 for invalid
// names, 503 while shutting down; anything else is logged and is a 500
// that says what was being done.
func (s *server) fail(ctx context.Context, what string, err error) error {
	var se huma.StatusError
	switch {
	case errors.As(err, &se):
		return se
	case errors.Is(err, supervisor.ErrUnknownComponent), errors.Is(err, health.ErrNotFound),
		errors.Is(err, errUnknownQueue), errors.Is(err, asynq.ErrQueueNotFound), errors.Is(err, asynq.ErrTaskNotFound):
		return huma.Error404NotFound(err.Error())
	case errors.Is(err, health.ErrTransition), errors.Is(err, supervisor.ErrNoOwner),
		errors.Is(err, asynq.ErrTaskIDConflict), errors.Is(err, asynq.ErrDuplicateTask):
		return huma.Error409Conflict(err.Error())
	case errors.Is(err, health.ErrInvalidName):
		return huma.Error422UnprocessableEntity(err.Error())
	case errors.Is(err, supervisor.ErrStopped):
		return huma.Error503ServiceUnavailable("the supervisor is shutting down")
	case ctx.Err() != nil:
		return huma.Error503ServiceUnavailable(what + ": " + ctx.Err().Error())
	}
	s.log.ErrorContext(ctx, "admin request failed", "op", what, "err", err)
	return huma.Error500InternalServerError(what + " failed: " + publicError(err))
}

// publicError is err's text for a client: what went wrong, without where
// Redis (or anything else behind this server) is. Network errors say "dial
// tcp 10.0.0.5:6379: …" and DNS errors name the host: those parts are
// replaced; the server log keeps the whole error.
func publicError(err error) string {
	s := err.Error()
	var dns *net.DNSError
	if errors.As(err, &dns) {
		s = strings.ReplaceAll(s, dns.Error(), "redis host name lookup failed")
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Err != nil {
		why := op.Err.Error()
		if errors.As(op.Err, &dns) {
			why = "host name lookup failed"
		}
		s = strings.ReplaceAll(s, op.Error(), "redis connection failed ("+why+")")
	}
	return hostPort.ReplaceAllString(s, "<address>")
}

// hostPort finds what still looks like an address with a port.
var hostPort = regexp.MustCompile(`(\[[0-9A-Fa-f:.]+\]|(\d{1,3}\.){3}\d{1,3}|[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)+):\d{1,5}\b`)

// announce appends an action event (docs/design.md §8) for what an operator
// did. The state change itself is already written and announced; a failure
// here is only logged.
func (s *server) announce(ctx context.Context, topic, action, target, result string) {
	e := health.Event{Topic: topic, Type: health.EventAction, Timestamp: s.cfg.Clock.Now().UnixMilli(),
		Action: &health.ActionView{Action: action, Target: target, Result: result}}
	if _, err := s.store.AddEvent(context.WithoutCancel(ctx), e); err != nil {
		s.log.WarnContext(ctx, "announce action", "action", action, "target", target, slog.Any("err", err))
	}
}
