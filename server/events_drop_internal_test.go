package server

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/vigil-dev/vigil/health"
)

// TestCatchUpEndsWhenDropped: a client dropped (it lagged, or the broker's
// Close gave up waiting for it) after its replay and before its writer let
// the frames through, with nothing left to write. catchUp went round
// forever: release refuses a writer that no longer holds frames. The
// client's finish waited for it, its connection and place were never given
// back, and Close hung.
func TestCatchUpEndsWhenDropped(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never called: nothing to replay
	defer rdb.Close()
	b := newBroker(SSEConfig{}, health.NewStore(rdb, "x:", 0), slog.New(slog.NewTextHandler(io.Discard, nil)), nil, nil, nil)
	c := &client{id: "1"}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c.cancel = cancel
	rec := httptest.NewRecorder()
	c.w.init(rec, http.NewResponseController(rec), nil, cancel)
	b.clients[c.id], b.catching[c] = c, struct{}{}
	c.drop()
	done := make(chan error, 1)
	go func() { done <- b.catchUp(ctx, c, zeroID) }()
	select {
	case err := <-done:
		if err == nil {
			t.Error("catchUp of a dropped client joined it")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("catchUp of a dropped client still runs after 5 s")
	}
}
