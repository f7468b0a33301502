package health_test

import (
	"errors"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/health"
)

// Remove deletes only what no one else holds and what runs no process.
func TestRemoveRefusals(t *testing.T) {
	s, _ := newStore(t)
	ctx := testCtx(t)
	running := record(tag0, health.StatusHealthy, 4100)
	seed(t, s, running)
	if err := s.Remove(ctx, running, "", t0); !errors.Is(err, health.ErrRunning) || !errors.Is(err, health.ErrTransition) {
		t.Errorf("remove a running worker: %v, want ErrRunning", err)
	}
	other := health.ComponentID{Queue: "tag", Slot: 1}
	c := record(other, health.StatusStopped, 0)
	seed(t, s, c)
	if err := s.Client().Set(ctx, s.Keys().Slot(other), "b/i2", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if err := s.Remove(ctx, c, "a/i1", t0); !errors.Is(err, health.ErrNotOwner) {
		t.Errorf("remove a slot held by b: %v, want ErrNotOwner", err)
	}
	if err := s.Remove(ctx, c, "", t0); !errors.Is(err, health.ErrNotOwner) {
		t.Errorf("remove a held slot as no one: %v, want ErrNotOwner", err)
	}
	if err := s.Remove(ctx, c, "b/i2", t0); err != nil {
		t.Fatalf("remove by the holder: %v", err)
	}
	for _, k := range []string{s.Keys().Component(other), s.Keys().Slot(other)} {
		if s.Client().Exists(ctx, k).Val() != 0 {
			t.Errorf("%s left", k)
		}
	}
	if _, err := s.Get(ctx, tag0); err != nil {
		t.Errorf("the running one went too: %v", err)
	}
}
