package explore

import (
	"reflect"
	"testing"
	"time"
)

// A seed is its schedule: drawn twice, the same plan; another seed, another.
func TestDrawDeterministic(t *testing.T) {
	for seed := uint64(1); seed < 200; seed++ {
		a, b := Draw(seed, BackendMixed), Draw(seed, BackendMixed)
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("seed %d drew two plans", seed)
		}
		if c := Draw(seed+1, BackendMixed); reflect.DeepEqual(a.Steps, c.Steps) {
			t.Fatalf("seeds %d and %d drew the same steps", seed, seed+1)
		}
	}
	// The backend names the Redis, not the schedule.
	if a, b := Draw(7, BackendMini), Draw(7, BackendReal); !reflect.DeepEqual(a.Steps, b.Steps) || a.Params.Backend == b.Params.Backend {
		t.Fatal("the backend changed the schedule, or was not applied")
	}
	if Draw(2, BackendMixed).Params.Backend != BackendMini || Draw(3, BackendMixed).Params.Backend != BackendReal {
		t.Fatal("mixed does not follow the seed's parity")
	}
}

// Every entry of the menu comes up, within bounds, in a few hundred seeds.
func TestDrawCoversMenu(t *testing.T) {
	seen := map[Kind]int{}
	for seed := uint64(1); seed <= 600; seed++ {
		p := Draw(seed, BackendMixed)
		if n := p.Params.Hosts; n < 2 || n > 3 {
			t.Fatalf("seed %d: %d hosts", seed, n)
		}
		var last time.Duration
		for _, s := range p.Steps {
			seen[s.Kind]++
			if s.At < last || s.At > p.Params.Faults {
				t.Fatalf("seed %d: step %s out of order or past the fault phase %s", seed, s, p.Params.Faults)
			}
			last = s.At
			if s.String() == "" {
				t.Fatalf("seed %d: step %+v prints as nothing", seed, s)
			}
			if s.Kind == HostNew && s.Host > 2 {
				t.Fatalf("seed %d: a fourth host", seed)
			}
		}
		if len(p.Jobs) == 0 {
			t.Fatalf("seed %d: no jobs", seed)
		}
		if p.End() < p.Params.Faults {
			t.Fatalf("seed %d: End %s before the fault phase ends", seed, p.End())
		}
	}
	for _, e := range weighted {
		if seen[e.kind] == 0 {
			t.Errorf("%s never drawn in 600 seeds", e.kind)
		}
	}
}

func TestPlanOnlyAndEnd(t *testing.T) {
	p := Plan{Params: Params{Faults: 2 * time.Second}, Steps: []Step{
		{At: time.Second, Kind: WorkerKill},
		{At: 1500 * time.Millisecond, Kind: RedisOutage, Dur: 10 * time.Second},
		{At: 1800 * time.Millisecond, Kind: OpResize, Dur: time.Hour}, // Dur means nothing here
	}}
	if got := p.End(); got != 11500*time.Millisecond {
		t.Fatalf("End %s", got)
	}
	q := p.Only([]int{0, 2, 9})
	if len(q.Steps) != 2 || q.Steps[0].Kind != WorkerKill || q.Steps[1].Kind != OpResize {
		t.Fatalf("Only kept %v", q.Steps)
	}
	if q.End() != 2*time.Second {
		t.Fatalf("End of the shrunk plan %s", q.End())
	}
}

func TestScriptOn(t *testing.T) {
	m := scriptOn("vx1:slot:")
	for _, c := range []struct {
		args []string
		want bool
	}{
		{[]string{"EVALSHA", "abc", "1", "vx1:slot:{worker:a:0}", "me"}, true},
		{[]string{"evalsha", "abc", "1", "vx1:slot:{worker:a:0}"}, true},
		{[]string{"EVAL", "return 1", "1", "vx1:slot:{x}"}, true},
		{[]string{"EVALSHA", "abc", "0", "vx1:slot:{x}"}, false},
		{[]string{"EVALSHA", "abc", "1", "vx1:component:{x}"}, false},
		{[]string{"GET", "vx1:slot:{x}", "1", "vx1:slot:{x}"}, false},
		{[]string{"EVALSHA", "abc"}, false},
	} {
		if got := m(c.args); got != c.want {
			t.Errorf("%v: %v, want %v", c.args, got, c.want)
		}
	}
}

// On a replicated topology the menu has failovers and none of the faults
// that need a single server's proxies; the other backends' plans are not
// changed by it (their seeds replay as before).
func TestDrawTopoMenu(t *testing.T) {
	for _, b := range []string{BackendSentinel, BackendCluster} {
		seen := map[Kind]int{}
		kills := 0
		for seed := uint64(1); seed <= 300; seed++ {
			p := Draw(seed, b)
			if p.Params.Backend != b {
				t.Fatalf("%s seed %d: drawn for %s", b, seed, p.Params.Backend)
			}
			for _, s := range p.Steps {
				seen[s.Kind]++
				switch s.Kind {
				case RedisOutage, RedisRestart, Partition, LostReply:
					t.Fatalf("%s seed %d: %s, which needs a single server's proxies", b, seed, s)
				case RedisLoss:
					if s.Flag {
						t.Fatalf("%s seed %d: an empty restart", b, seed)
					}
				case Failover:
					if s.N < 0 || s.N > 2 || (!s.Flag && s.Dur != 0) || s.Dur > 2*time.Second {
						t.Fatalf("%s seed %d: %+v", b, seed, s)
					}
					if s.Flag {
						kills++
					}
				}
			}
		}
		if seen[Failover] < 100 || kills == 0 || kills == seen[Failover] || seen[RedisPause] == 0 || seen[RedisLoss] == 0 {
			t.Fatalf("%s: %d failovers (%d kills), %d pauses, %d flushes in 300 seeds", b, seen[Failover], kills, seen[RedisPause], seen[RedisLoss])
		}
	}
	for seed := uint64(1); seed <= 300; seed++ {
		for _, s := range Draw(seed, BackendMixed).Steps {
			if s.Kind == Failover {
				t.Fatalf("seed %d: a failover on a single server", seed)
			}
		}
	}
}
