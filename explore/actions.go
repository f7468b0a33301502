package explore

import (
	"context"
	"fmt"
	"time"

	"github.com/hibiken/asynq"

	"github.com/vigil-dev/vigil/explore/internal/hostproto"
	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/queue"
	"github.com/vigil-dev/vigil/supervisor"
)

// actingHost is the host an operator action is made from: the step's, or
// another live one.
func (w *world) actingHost(i int) (*host, *hostProc) {
	for k := range w.hosts {
		h := w.hosts[(i+k)%len(w.hosts)]
		if p := h.current(); p != nil {
			return h, p
		}
	}
	return nil, nil
}

// hostAction makes an operator action through a supervisor's API, and
// checks that it answers in time (invariant 6).
func (w *world) hostAction(s Step) {
	h, p := w.actingHost(s.Host)
	if h == nil {
		w.b.logf("%s: no host up", s.Kind)
		return
	}
	comp := health.ComponentID{Queue: s.Queue, Slot: s.Slot}.String()
	req := hostproto.Request{Component: comp, Timeout: time.Minute}
	switch s.Kind {
	case OpStop:
		req.Op = hostproto.OpStop
		w.b.holdable(comp)
	case OpRestart:
		req.Op = hostproto.OpRestart
	case OpReset:
		req.Op, req.Restart = hostproto.OpReset, s.Flag
		if !s.Flag {
			w.b.holdable(comp)
		}
	case OpRolling:
		req.Op, req.Queue, req.Component = hostproto.OpRolling, s.Queue, ""
		comp = "pool " + s.Queue
	}
	w.b.count(s.Kind)
	w.b.logf("%s %s from %s", s.Kind, comp, h.id)
	w.actions.Add(1)
	go func() {
		defer w.actions.Done()
		began := time.Now()
		m, err := p.request(req, 70*time.Second)
		switch {
		case err == errHostDown:
			w.b.logf("%s %s from %s: the host went down before answering", s.Kind, comp, h.id)
			return
		case err != nil:
			w.violate(6, "%s %s from %s: %v", s.Kind, comp, h.id, err)
			return
		}
		res := "ok " + m.Status
		if m.Err != "" {
			res = "error: " + m.Err
		}
		w.b.logf("%s %s from %s answered in %s: %s", s.Kind, comp, h.id, m.Took.Round(time.Millisecond), res)
		if limit := StopTimeout + 2*time.Second; m.Took > limit && !w.b.anyDisturbed(began, time.Now()) {
			w.violate(6, "%s %s from %s answered after %s (limit %s): %s", s.Kind, comp, h.id, m.Took.Round(time.Millisecond), limit, res)
		}
	}()
}

// clusterAction makes an operator action that is a write to Redis from
// any host (pause, drain, pool size, asynq's inspector).
func (w *world) clusterAction(s Step) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var err error
	desc := s.String()[8:]
	switch s.Kind {
	case OpPauseAll:
		_, _, err = w.ctl.PauseAll(ctx, w.queues(), queue.Actor{Who: "explore"})
		w.later(s.Dur, func() {
			w.opLog("op-resume-all", func(ctx context.Context) error { _, _, e := w.ctl.ResumeAll(ctx, w.queues()); return e })
		})
	case OpPauseQueue:
		_, err = w.ctl.PauseQueue(ctx, s.Queue, queue.Actor{Who: "explore"})
		w.later(s.Dur, func() {
			w.opLog("op-resume-queue "+s.Queue, func(ctx context.Context) error { _, e := w.ctl.ResumeQueue(ctx, s.Queue); return e })
		})
	case OpDrain:
		hid := w.hosts[s.Host].id
		err = supervisor.SetDrain(ctx, w.store, hid, true)
		w.later(s.Dur, func() {
			w.opLog("op-undrain "+hid, func(ctx context.Context) error { return supervisor.SetDrain(ctx, w.store, hid, false) })
		})
	case OpResize:
		err = supervisor.SetPoolSize(ctx, w.store, s.Queue, s.N)
		if err == nil {
			w.mu.Lock()
			w.sizes[s.Queue] = s.N
			w.mu.Unlock()
		}
	case OpJobRetry, OpJobDelete, OpJobCancel:
		desc, err = w.jobAction(s)
	}
	w.b.count(s.Kind)
	if err != nil {
		w.b.logf("%s: error: %v", desc, err)
		return
	}
	w.b.logf("%s", desc)
}

func (w *world) opLog(what string, fn func(context.Context) error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := fn(ctx); err != nil {
		w.b.logf("%s: error: %v", what, err)
		return
	}
	w.b.logf("%s", what)
}

// jobAction retries an archived task, deletes a pending or archived one,
// or cancels an active one, picked by the step's number among those listed.
func (w *world) jobAction(s Step) (string, error) {
	var list []*asynq.TaskInfo
	var err error
	switch s.Kind {
	case OpJobRetry:
		list, err = w.insp.ListArchivedTasks(s.Queue, asynq.PageSize(100))
	case OpJobDelete:
		list, err = w.insp.ListPendingTasks(s.Queue, asynq.PageSize(100))
		if err == nil && len(list) == 0 {
			list, err = w.insp.ListArchivedTasks(s.Queue, asynq.PageSize(100))
		}
	case OpJobCancel:
		list, err = w.insp.ListActiveTasks(s.Queue, asynq.PageSize(100))
	}
	if err != nil {
		return string(s.Kind) + " on " + s.Queue, err
	}
	if len(list) == 0 {
		return fmt.Sprintf("%s on %s: no task to act on", s.Kind, s.Queue), nil
	}
	t := list[s.N%len(list)]
	desc := fmt.Sprintf("%s %s (%s, %s)", s.Kind, t.ID, t.Type, t.State)
	switch s.Kind {
	case OpJobRetry:
		v, lerr := w.readLedger()
		if lerr != nil {
			return desc, lerr
		}
		crashes := w.injectedCrashesIn(s.Queue)
		err = w.insp.RunTask(s.Queue, t.ID)
		if err == nil {
			w.jobs.mu.Lock()
			if j := w.jobs.byID[t.ID]; j != nil {
				j.retriedAtRuns = v.runs[t.ID]
				j.retriedAtCrashes = crashes
			}
			w.jobs.mu.Unlock()
		}
	case OpJobDelete:
		err = w.insp.DeleteTask(s.Queue, t.ID)
		if err == nil {
			w.jobs.mu.Lock()
			if j := w.jobs.byID[t.ID]; j != nil {
				j.deleted = true
			}
			w.jobs.mu.Unlock()
		}
	case OpJobCancel:
		w.jobs.mu.Lock()
		if j := w.jobs.byID[t.ID]; j != nil {
			j.cancelled = true // before the cancel: its effect may be judged at once
		}
		w.jobs.mu.Unlock()
		err = w.insp.CancelProcessing(t.ID)
	}
	return desc, err
}
