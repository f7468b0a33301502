package failover_test

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/internal/testtopo"
)

// The faults of issue 17's "Bad input / faults" run as scenarios of
// TestFailover: two hosts, jobs through both APIs, the fault, and the
// same judgement (no healthy worker killed, no crash counted, no job done
// twice), plus each fault's own log line and metric (check).
func init() { scenarios = append(scenarios, faultScenarios...) }

func init() {
	// A Cluster failover during a graceful shutdown (the Sentinel one is
	// sentinel/kill-during-shutdown).
	sc := clusterKill("cluster/kill-during-shutdown", "asynq:{"+queueName+"}:pending")
	sc.stopHost = true
	scenarios = append(scenarios, sc)
}

var pairPorts = [2]int{port(6437), port(6438)}

// refusedFor is how long the hosts' Redis refuses their calls (READONLY,
// CLUSTERDOWN): shorter than the lease (10 s), longer than a third of it
// (a tick) and than the workers' degraded heartbeat (3 failures).
const refusedFor = 6 * time.Second

var faultScenarios = []scenario{
	{name: "fault/readonly", start: func(t *testing.T) (string, func(context.Context) (time.Time, testtopo.Switch, error)) {
		p := testtopo.StartPair(t, pairPorts[0], pairPorts[1])
		return "redis://" + p.Master.Addr() + "/0", func(ctx context.Context) (time.Time, testtopo.Switch, error) {
			at, err := p.Demote(ctx)
			if err != nil {
				return at, testtopo.Switch{}, err
			}
			select {
			case <-time.After(time.Until(at.Add(refusedFor))):
			case <-ctx.Done():
				return at, testtopo.Switch{}, ctx.Err()
			}
			back, err := p.Restore(ctx)
			return at, testtopo.Switch{NewMaster: p.Master, Promoted: back, Announced: back}, err
		}
	}, check: wantFault("READONLY")},
	{name: "fault/clusterdown", start: func(t *testing.T) (string, func(context.Context) (time.Time, testtopo.Switch, error)) {
		c := testtopo.StartCluster(t, clusterPorts, testtopo.ClusterConfig{})
		return c.URL, func(ctx context.Context) (time.Time, testtopo.Switch, error) {
			slot, owner, at, err := c.Uncover(ctx)
			if err != nil {
				return at, testtopo.Switch{}, err
			}
			select {
			case <-time.After(time.Until(at.Add(refusedFor))):
			case <-ctx.Done():
				return at, testtopo.Switch{}, ctx.Err()
			}
			back, err := c.Cover(ctx, slot, owner)
			return at, testtopo.Switch{NewMaster: owner, Promoted: back, Announced: back}, err
		}
	}, check: wantFault("CLUSTERDOWN")},
	// The sentinel names a master that does not answer (frozen, and no
	// failover: down-after is a minute), then no sentinel answers either.
	{name: "fault/sentinel-master-down", start: func(t *testing.T) (string, func(context.Context) (time.Time, testtopo.Switch, error)) {
		s := testtopo.StartSentinel(t, sentinelPorts, testtopo.SentinelConfig{DownAfter: time.Minute})
		return s.URL, func(ctx context.Context) (time.Time, testtopo.Switch, error) {
			at := s.Master.Pause()
			return outageFor(ctx, at, s.Master.Resume)
		}
	}, check: wantUnreachable("sentinel " + testtopo.MasterName + " via 127.0.0.1:" + strconv.Itoa(port(6433)))},
	{name: "fault/sentinels-down", start: func(t *testing.T) (string, func(context.Context) (time.Time, testtopo.Switch, error)) {
		s := testtopo.StartSentinel(t, sentinelPorts, testtopo.SentinelConfig{DownAfter: time.Minute})
		return s.URL, func(ctx context.Context) (time.Time, testtopo.Switch, error) {
			// The master frozen too: every pooled connection fails and a new
			// one must ask a sentinel.
			s.Sentinel.Kill()
			at := s.Master.Pause()
			return outageFor(ctx, at, func() time.Time {
				s.Sentinel.Restart(t)
				return s.Master.Resume()
			})
		}
	}, check: wantUnreachable("sentinel " + testtopo.MasterName + " via 127.0.0.1:" + strconv.Itoa(port(6433)))},
}

// outageFor waits refusedFor after at, then ends the fault with end.
func outageFor(ctx context.Context, at time.Time, end func() time.Time) (time.Time, testtopo.Switch, error) {
	select {
	case <-time.After(time.Until(at.Add(refusedFor))):
	case <-ctx.Done():
		end()
		return at, testtopo.Switch{}, ctx.Err()
	}
	back := end()
	return at, testtopo.Switch{Promoted: back, Announced: back}, nil
}

// wantUnreachable checks that a host logged one outage naming where it
// connects (redis), counted it as unreachable, and found Redis back once;
// a host none of whose calls failed (one that holds no slot makes a few
// calls a tick: a frozen master may answer them late) logs none.
func wantUnreachable(redis string) func(t *testing.T, hosts []*host) {
	return func(t *testing.T, hosts []*host) {
		t.Helper()
		seen := 0
		for _, h := range hosts {
			line := `"msg":"redis unreachable: holding state in memory, judging no heartbeats","redis":"` + redis + `"`
			n, back := h.count(line), h.count(`"msg":"redis reachable again"`)
			if n == 0 && back == 0 && h.count(`"msg":"redis unreachable`) == 0 {
				continue
			}
			seen++
			if n != 1 || back != 1 {
				t.Errorf("host %s: %d lines %s and %d \"redis reachable again\", want 1 each", h.id, n, line, back)
			}
			wantMetric(t, h, "unreachable")
		}
		if seen == 0 {
			t.Errorf("no host logged the outage")
		}
		noFalseLoss(t, hosts)
	}
}

// noFalseLoss checks that a fault shorter than the lease made no host
// declare another lost, nor conclude that Redis lost its data: records
// not written during it must be written again before they expire, or not
// be taken for a loss.
func noFalseLoss(t *testing.T, hosts []*host) {
	t.Helper()
	for _, h := range hosts {
		for _, line := range []string{`"msg":"host lost"`, "lost its data", "slot lease lost"} {
			if n := h.count(line); n > 0 {
				t.Errorf("host %s: %d lines %s after a fault of %s (lease 10s)", h.id, n, line, refusedFor)
			}
		}
	}
}

func wantMetric(t *testing.T, h *host, kind string) {
	t.Helper()
	code, body, err := h.do(http.MethodGet, "/metrics", nil)
	if err != nil || code != http.StatusOK {
		t.Errorf("host %s: GET /metrics: %d %v", h.id, code, err)
		return
	}
	if !hasPositive(string(body), `vigil_redis_faults_total{kind="`+kind+`"}`) {
		t.Errorf("host %s: vigil_redis_faults_total{kind=%q} not counted:\n%s", h.id, kind, grepLines(string(body), "vigil_redis"))
	}
}

// wantFault checks that each host logged the supervisor's line naming
// kind and counted it in vigil_redis_faults_total.
func wantFault(kind string) func(t *testing.T, hosts []*host) {
	return func(t *testing.T, hosts []*host) {
		t.Helper()
		for _, h := range hosts {
			// Once: a probe answered by a PING, while every write is
			// refused, ended the outage at once, and the next write began
			// another.
			line := "redis refuses the supervisor's calls (" + kind + ")"
			if n, back := h.count(`"msg":"`+line), h.count(`"msg":"redis reachable again"`); n != 1 || back != 1 {
				t.Errorf("host %s: %d lines %q and %d \"redis reachable again\", want 1 each", h.id, n, line, back)
			}
			wantMetric(t, h, kind)
		}
		noFalseLoss(t, hosts)
	}
}

// hasPositive reports whether the exposition has series with a value > 0.
func hasPositive(text, series string) bool {
	for line := range strings.SplitSeq(text, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok && v != "0" {
			return true
		}
	}
	return false
}

func grepLines(text, sub string) string {
	var out []string
	for line := range strings.SplitSeq(text, "\n") {
		if strings.Contains(line, sub) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}
