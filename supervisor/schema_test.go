package supervisor_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/supervisor"
)

// A host refuses to start against a key layout newer than it knows, and
// starts nothing.
func TestStartRefusesNewerSchema(t *testing.T) {
	h := newHarness(t, supervisor.Config{
		Pools: []supervisor.Pool{{Queue: "q", Workers: 1, Command: []string{testWorker, "beat"}}},
	})
	ctx := context.Background()
	if err := h.rdb.Set(ctx, h.store.Keys().Schema(), health.SchemaVersion+1, 0).Err(); err != nil {
		t.Fatal(err)
	}
	err := h.sup.Start(ctx)
	if !errors.Is(err, health.ErrSchemaNewer) || !strings.Contains(err.Error(), "upgrade vigil") {
		t.Fatalf("Start: %v, want ErrSchemaNewer saying to upgrade", err)
	}
	if ids, _ := h.store.IDs(ctx); len(ids) != 0 {
		t.Fatalf("started components %v", ids)
	}
	if n, _ := h.rdb.Exists(ctx, h.store.Keys().Host("h1")).Result(); n != 0 {
		t.Fatal("the host registered itself")
	}
}

// A fresh Redis gets the version on the first start.
func TestStartWritesSchema(t *testing.T) {
	h := newHarness(t, supervisor.Config{})
	h.start()
	v, err := h.rdb.Get(context.Background(), h.store.Keys().Schema()).Int()
	if err != nil || v != health.SchemaVersion {
		t.Fatalf("schema %d, %v; want %d", v, err, health.SchemaVersion)
	}
}
