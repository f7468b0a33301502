package explore

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// The topologies start real redis-server processes and fail them over:
// they run with the failover suite (VIGIL_FAILOVER=1, as make
// test-failover sets), not in make test.
func gateTopo(t *testing.T) {
	t.Helper()
	if os.Getenv("VIGIL_FAILOVER") == "" {
		t.Skip("starts real Redis topologies: set VIGIL_FAILOVER=1")
	}
	for _, bin := range []string{"redis-server", "redis-cli"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("%s not installed", bin)
		}
	}
}

// failoverTwice fails shard 0 over by hand, then by a SIGKILL of the new
// master: each time the replica takes over and the old master rejoins as
// its replica, in sync, so that a seed may fail over again.
func failoverTwice(t *testing.T, top topology) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, kill := range []bool{false, true} {
		var f *failover
		var err error
		// The sentinel learns of a rejoined replica at its next INFO (up to
		// 10 s): a failover is refused until then.
		deadline := time.Now().Add(15 * time.Second)
		for {
			if f, err = top.Failover(ctx, 0, kill); err == nil || time.Now().After(deadline) {
				break
			}
			time.Sleep(200 * time.Millisecond) // polling the sentinel's view, another process
		}
		if err != nil {
			t.Fatalf("failover (kill %v): %v", kill, err)
		}
		if _, err := top.Failover(ctx, 0, kill); err == nil {
			t.Fatal("a second failover of the shard was begun while the first was under way")
		}
		msg, err := f.switched(ctx)
		if err != nil {
			t.Fatalf("kill %v: %v", kill, err)
		}
		t.Logf("%s; %s", f.desc, msg)
		if msg, err = f.rejoin(ctx); err != nil {
			t.Fatalf("kill %v: %v", kill, err)
		}
		t.Log(msg)
	}
}

func TestSentinelTopoFailsOverAgain(t *testing.T) {
	gateTopo(t)
	top, err := newSentinelTopo(&ports{}, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer top.Close()
	failoverTwice(t, top)
}

func TestClusterTopoFailsOverAgain(t *testing.T) {
	gateTopo(t)
	top, err := newClusterTopo(&ports{}, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer top.Close()
	failoverTwice(t, top)
}

// keySlot is Redis Cluster's: the slots redis-cli's CLUSTER KEYSLOT gives.
func TestKeySlot(t *testing.T) {
	for tag, want := range map[string]int{"a": 15495, "b": 3300, "asynq:queues": 3477, "sched": 7021} {
		if got := keySlot(tag); got != want {
			t.Errorf("keySlot(%q) = %d, want %d", tag, got, want)
		}
	}
	for _, slot := range shardSlots {
		k := probeKey(slot)
		tag := k[strings.IndexByte(k, '{')+1 : len(k)-1]
		if s := keySlot(tag); s < slot || s >= slot+5461 {
			t.Errorf("probeKey(%d) = %s in slot %d", slot, k, s)
		}
	}
}
