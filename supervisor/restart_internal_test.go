package supervisor

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"
)

// TestServerAge: a server's run and how long it has run at least, from
// INFO server, whose uptime_in_seconds is a difference of two seconds
// rounded down.
func TestServerAge(t *testing.T) {
	tests := []struct {
		info string
		want time.Duration
	}{
		// Started at 100.9 s, now 101.2: uptime 1, the start at most 101.0.
		{"# Server\r\nredis_version:7.0.15\r\nrun_id:abc\r\nuptime_in_seconds:1\r\nserver_time_usec:101200000\r\n", 200 * time.Millisecond},
		{"run_id:abc\r\nuptime_in_seconds:0\r\nserver_time_usec:101999999\r\n", 0},
		{"run_id:abc\r\nuptime_in_seconds:42\r\nserver_time_usec:1790000000500000\r\n", 41*time.Second + 500*time.Millisecond},
		// An older Redis, no server_time_usec: uptime − 1 s.
		{"# Server\r\nrun_id:abc\r\nuptime_in_seconds:42\r\nuptime_in_days:0\r\n", 41 * time.Second},
		{"uptime_in_seconds:0\r\nrun_id:abc\r\n", 0},
	}
	for _, tt := range tests {
		if run, got, err := serverAge(tt.info); err != nil || got != tt.want || run != "abc" {
			t.Errorf("serverAge(%q) = %q, %v, %v; want abc, %v", tt.info, run, got, err, tt.want)
		}
	}
	for _, bad := range []string{"", "# Server\r\nredis_version:7.0.15\r\n", "run_id:abc\r\nuptime_in_seconds:-1\r\n",
		"run_id:abc\r\nuptime_in_seconds:x\r\n", "run_id:abc\r\nserver_time_usec:5\r\n", "uptime_in_seconds:5\r\n"} {
		if _, _, err := serverAge(bad); !errors.Is(err, errNoUptime) {
			t.Errorf("serverAge(%q): %v, want errNoUptime", bad, err)
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
	if !a.restarted(7, "r", t0.Add(2*time.Second)) {
		t.Fatal("a new run not counted")
	}
	now := t0.Add(2500 * time.Millisecond)
	if got := a.answeredFor(7, ttl, now); got != 500*time.Millisecond {
		t.Errorf("restarted shard: answeredFor = %v, want 500ms", got)
	}
	if got := a.answeredFor(9, ttl, now); got != 0 {
		t.Errorf("other shard: answeredFor = %v, want 0", got)
	}
	if a.restarted(7, "r", now) {
		t.Error("a run counted twice")
	}
	if !a.restarted(9, "r", now) {
		t.Error("another shard's run not counted")
	}
}

// TestRestartedRunsInTurn: servers that answer for a shard in turn (a
// proxy over two, a master moving back and forth) give the grace once
// each, not at every judgement: a hung worker is still killed (invariant
// 4). Before, only the last run was kept, and A, B, A, B… each counted.
func TestRestartedRunsInTurn(t *testing.T) {
	a := newAvailability(time.Second, 100*time.Millisecond, time.Second)
	t0 := time.Unix(1_790_000_000, 0)
	var got []bool
	for i, run := range []string{"A", "B", "A", "B", "A"} {
		got = append(got, a.restarted(7, run, t0.Add(time.Duration(i)*time.Second)))
	}
	if want := []bool{true, true, false, false, false}; !slices.Equal(got, want) {
		t.Fatalf("runs A, B, A, B, A counted %v, want %v", got, want)
	}
	// The memory is bounded: keptRuns later runs push A out.
	for i := range keptRuns {
		if !a.restarted(7, fmt.Sprint("r", i), t0) {
			t.Fatalf("new run r%d not counted", i)
		}
	}
	if !a.restarted(7, "A", t0) {
		t.Error("a run pushed out by keptRuns later ones was not counted again")
	}
	if len(a.runs[7]) != keptRuns {
		t.Errorf("%d runs kept, want %d", len(a.runs[7]), keptRuns)
	}
}

// TestInfoRefusal tells a lasting refusal of INFO server from a passing
// error reply.
func TestInfoRefusal(t *testing.T) {
	for msg, want := range map[string]bool{
		"section (server) is not supported":                              true, // miniredis
		"NOPERM User vigil has no permissions to run the 'info' command": true,
		"ERR unknown command 'INFO', with args beginning with: 'server'": true,
		"ERR max number of clients reached":                              false,
	} {
		if got := infoRefusal(errors.New(msg)); got != want {
			t.Errorf("infoRefusal(%q) = %v, want %v", msg, got, want)
		}
	}
	if !infoRefusal(errNoUptime) {
		t.Error("infoRefusal(errNoUptime) = false")
	}
}
