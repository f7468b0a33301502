package health_test

import (
	"testing"
	"time"

	"github.com/vigil-dev/vigil/health"
)

// created_at is the first registration, set once; the version is what
// the worker's heartbeat reports, cleared when a new process starts
// (issue 20, worker details).
func TestCreatedAtOnceAndVersionFromHeartbeat(t *testing.T) {
	s, _ := newStore(t)
	ctx := testCtx(t)
	c := record(tag0, health.StatusStarting, beatPID)
	if _, err := s.Write(ctx, c, health.Write{Actor: health.ActorMonitor, Index: true}); err != nil {
		t.Fatal(err)
	}
	h, _ := newHeartbeater(t, s)
	h.Version = "v1.2.3"
	if _, err := h.Beat(ctx); err != nil {
		t.Fatal(err)
	}
	got, err := s.Get(ctx, tag0)
	if err != nil {
		t.Fatal(err)
	}
	if !got.CreatedAt.Equal(c.UpdatedAt) || got.Version != "v1.2.3" {
		t.Fatalf("created_at %v version %q; want %v, v1.2.3", got.CreatedAt, got.Version, c.UpdatedAt)
	}
	if v := got.View(); v.CreatedAt != c.UpdatedAt.UnixMilli() || v.Version != "v1.2.3" {
		t.Errorf("view %+v", v)
	}
	// Later writes (a stop, a new start) keep created_at; the new
	// process's start clears the old one's version.
	c.Status, c.UpdatedAt = health.StatusStopping, c.UpdatedAt.Add(time.Minute)
	if _, err := s.Write(ctx, c, health.Write{Actor: health.ActorMonitor}); err != nil {
		t.Fatal(err)
	}
	c.Status, c.UpdatedAt = health.StatusStopped, c.UpdatedAt.Add(time.Minute)
	if _, err := s.Write(ctx, c, health.Write{Actor: health.ActorMonitor}); err != nil {
		t.Fatal(err)
	}
	c.Status, c.UpdatedAt = health.StatusStarting, c.UpdatedAt.Add(time.Minute)
	if _, err := s.Write(ctx, c, health.Write{Actor: health.ActorMonitor}); err != nil {
		t.Fatal(err)
	}
	got, _ = s.Get(ctx, tag0)
	if !got.CreatedAt.Equal(t0.Add(time.Second)) || got.Version != "" {
		t.Errorf("after a restart: created_at %v (want %v), version %q (want none)", got.CreatedAt, t0.Add(time.Second), got.Version)
	}
}

// A record the heartbeat re-creates (Redis lost its data) is registered
// then.
func TestRecreatedRecordHasCreatedAt(t *testing.T) {
	s, _ := newStore(t)
	h, fc := newHeartbeater(t, s)
	if _, err := h.Beat(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Get(testCtx(t), tag0); !got.CreatedAt.Equal(fc.Now()) {
		t.Errorf("created_at %v, want %v", got.CreatedAt, fc.Now())
	}
}
