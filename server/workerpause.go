package server

import (
	"context"
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"github.com/vigil-dev/vigil/health"
)

// WorkerPauseInput is a worker and who pauses it, and why.
type WorkerPauseInput struct {
	ComponentParam
	PauseInput
}

func (s *server) registerWorkerPause(api huma.API) {
	route(api, accessWrite, huma.Operation{
		OperationID: "pause-worker", Method: http.MethodPost, Path: "/api/v1/workers/{component}/pause", Tags: []string{"workers"},
		Summary: "Pause one worker",
		Description: "The worker takes no new task (its queue and the other workers go on), keeps beating and finishes what it runs; " +
			"the pause survives the worker's restarts and its supervisor's until a resume. 200 also when it was paused (the first pause's who and why stay).",
		Errors: []int{http.StatusNotFound, http.StatusUnprocessableEntity, http.StatusServiceUnavailable},
	}, func(ctx context.Context, in *WorkerPauseInput) (*WorkerActionOutput, error) {
		return s.pauseWorker(ctx, in, true)
	})
	route(api, accessWrite, huma.Operation{
		OperationID: "resume-worker", Method: http.MethodPost, Path: "/api/v1/workers/{component}/resume", Tags: []string{"workers"},
		Summary:     "Resume a paused worker",
		Description: "It takes tasks again at its next report (a heartbeat interval). 200 also when it was not paused.",
		Errors:      []int{http.StatusNotFound, http.StatusUnprocessableEntity, http.StatusServiceUnavailable},
	}, func(ctx context.Context, in *WorkerPauseInput) (*WorkerActionOutput, error) {
		return s.pauseWorker(ctx, in, false)
	})
}

func (s *server) pauseWorker(ctx context.Context, in *WorkerPauseInput, pause bool) (*WorkerActionOutput, error) {
	id, err := in.id()
	if err != nil {
		return nil, err
	}
	action, done, already := "resume", "resumed", "was not paused"
	if pause {
		action, done, already = "pause", "paused: it takes no new task", "was paused already"
	}
	// A component Redis has never heard of is a 404.
	if _, err := s.store.Get(ctx, id); err != nil {
		return nil, s.fail(ctx, action+" "+id.String(), err)
	}
	var changed bool
	if pause {
		changed, err = s.store.PauseWorker(ctx, id, health.WorkerPause{At: s.cfg.Clock.Now(), By: in.By, Reason: in.Reason})
	} else {
		changed, err = s.store.ResumeWorker(ctx, id)
	}
	if err != nil {
		return nil, s.fail(ctx, action+" "+id.String(), err)
	}
	msg := id.String() + " " + done
	if !changed {
		msg = id.String() + " " + already
	} else {
		s.announce(ctx, id.Topic(), action, id.String(), msg)
	}
	c, err := s.store.Get(ctx, id)
	if err != nil {
		return nil, s.fail(ctx, action+" "+id.String(), err)
	}
	w := []Worker{workerOf(c)}
	if err := s.withPauses(ctx, w); err != nil {
		return nil, s.fail(ctx, action+" "+id.String(), err)
	}
	return &WorkerActionOutput{Body: WorkerAction{Action: action, Message: msg, Worker: w[0]}}, nil
}

// withPauses fills in the operators' pauses of the workers, in one round
// trip.
func (s *server) withPauses(ctx context.Context, ws []Worker) error {
	ids := make([]health.ComponentID, len(ws))
	for i, w := range ws {
		ids[i], _ = health.ParseComponentID(w.Component) // from a record: valid
	}
	pauses, err := s.store.WorkerPauses(ctx, ids)
	if err != nil {
		return err
	}
	for i := range ws {
		if p, ok := pauses[ids[i]]; ok {
			ws[i].Paused, ws[i].PausedBy, ws[i].PausedAt, ws[i].PauseReason = true, p.By, p.At.UnixMilli(), p.Reason
		}
	}
	return nil
}
