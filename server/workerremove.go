package server

import (
	"context"
	"net/http"

	"github.com/danielgtaylor/huma/v2"
)

func (s *server) registerWorkerRemove(api huma.API) {
	route(api, accessWrite, huma.Operation{
		OperationID: "remove-worker", Method: http.MethodDelete, Path: "/api/v1/workers/{component}", Tags: []string{"workers"},
		Summary: "Remove a worker beyond its pool",
		Description: "Deletes a stopped (or failed) worker whose slot is at or beyond its pool's size, for good: its record, restart history, " +
			"heartbeat, counters and pause; a `worker_removed` event keeps its last state and history. The host holding the slot does it " +
			"(a pool shrink does it by itself once the slot's process stopped); this is for what is left. 409 within the pool or while it " +
			"runs or waits to restart, 404 for an unknown worker. The answer's worker is its state before the removal.",
		Errors: []int{http.StatusNotFound, http.StatusConflict, http.StatusUnprocessableEntity, http.StatusServiceUnavailable},
	}, s.removeWorker)
}

func (s *server) removeWorker(ctx context.Context, in *ComponentParam) (*WorkerActionOutput, error) {
	id, err := in.id()
	if err != nil {
		return nil, err
	}
	c, err := s.store.Get(ctx, id) // a component Redis has never heard of is a 404
	if err != nil {
		return nil, s.fail(ctx, "remove "+id.String(), err)
	}
	if err := s.cfg.supervisor().Remove(ctx, id); err != nil {
		return nil, s.fail(ctx, "remove "+id.String(), err)
	}
	msg := id.String() + " removed"
	s.announce(ctx, id.Topic(), "remove", id.String(), msg)
	return &WorkerActionOutput{Body: WorkerAction{Action: "remove", Message: msg, Worker: workerOf(c)}}, nil
}
