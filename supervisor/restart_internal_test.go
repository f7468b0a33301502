package supervisor

import (
	"errors"
	"testing"
	"time"
)

// TestParseUptime reads INFO server's uptime_in_seconds, and says so when
// a server does not give it.
func TestParseUptime(t *testing.T) {
	info := "# Server\r\nredis_version:7.0.15\r\nrun_id:3f1c\r\nuptime_in_seconds:42\r\nuptime_in_days:0\r\n"
	if up, err := parseUptime(info); err != nil || up != 42*time.Second {
		t.Errorf("parseUptime = %v, %v; want 42s", up, err)
	}
	for _, bad := range []string{"", "# Server\r\nredis_version:7.0.15\r\n", "uptime_in_seconds:-1\r\n", "uptime_in_seconds:x\r\n"} {
		if _, err := parseUptime(bad); !errors.Is(err, errNoUptime) {
			t.Errorf("parseUptime(%q): %v, want errNoUptime", bad, err)
		}
	}
}

// TestRestartedShard: a restart learnt for one Cluster shard gives its
// workers the grace, not the other shards'.
func TestRestartedShard(t *testing.T) {
	const ttl = time.Second
	t0 := time.Unix(1_790_000_000, 0)
	a := newAvailability(ttl, 100*time.Millisecond, time.Second)
	a.answered(t0, t0.Add(time.Millisecond), 7, 9)
	a.restarted(7, t0.Add(2*time.Second))
	now := t0.Add(2500 * time.Millisecond)
	if got := a.answeredFor(7, ttl, now); got != 500*time.Millisecond {
		t.Errorf("restarted shard: answeredFor = %v, want 500ms", got)
	}
	if got := a.answeredFor(9, ttl, now); got != 0 {
		t.Errorf("other shard: answeredFor = %v, want 0", got)
	}
}
