package server

import (
	"context"
	"log/slog"
	"testing"
	"time"
)

// A change that waited for its worker's record longer than waitMax is
// given up without another read: a record that cannot be read at all (a key
// of another type) would fail every read of the workers the broker has no
// view of, for good. (The store is nil: a read would panic.)
func TestWaitingChangeGivenUp(t *testing.T) {
	wv := newWorkerViews(nil, slog.New(slog.DiscardHandler))
	var jc jobChange
	jc.Data.Component, jc.Data.PID, jc.Data.WorkerJob, jc.Data.WorkerSeq = "worker:q:0", 42, "t1", 1
	wv.wait["worker:q:0"] = waitingChange{jc: jc, since: time.Now().Add(-waitMax - time.Second)}
	if out := wv.apply(context.Background(), nil, zeroID); len(out) != 0 || wv.waiting() {
		t.Fatalf("out %v, still waiting: %v", out, wv.wait)
	}
}
