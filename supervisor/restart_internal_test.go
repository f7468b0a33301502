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
	if !a.restarted(7, "r", t0.Add(time.Second), t0.Add(2*time.Second)) {
		t.Fatal("a new run not counted")
	}
	now := t0.Add(2500 * time.Millisecond)
	if got := a.answeredFor(7, ttl, now); got != 500*time.Millisecond {
		t.Errorf("restarted shard: answeredFor = %v, want 500ms", got)
	}
	if got := a.answeredFor(9, ttl, now); got != 0 {
		t.Errorf("other shard: answeredFor = %v, want 0", got)
	}
	if a.restarted(7, "r", t0.Add(time.Second), now) {
		t.Error("a run counted twice")
	}
	if !a.restarted(9, "r", t0.Add(time.Second), now) {
		t.Error("another shard's run not counted")
	}
}

// TestRestartedRunsInTurn: servers that answer for a shard in turn (a
// proxy over several, a master moving back and forth), each started
// after a hung worker's last beat, give the grace once in all, not once
// each nor at every judgement: the hung worker is still killed
// (invariant 4). Before, the last keptRuns runs were remembered: two in
// turn gave the grace twice, and five (review of 8981748) at every
// judgement. A server started after the last grace gives another.
func TestRestartedRunsInTurn(t *testing.T) {
	a := newAvailability(time.Second, 100*time.Millisecond, time.Second)
	t0 := time.Unix(1_790_000_000, 0)
	runs := []string{"A", "B", "C", "D", "E"}
	var granted []int
	for i := range 50 {
		now := t0.Add(time.Duration(i) * time.Second)
		// Each started a second before the first judgement (its start
		// read to the second: up to a second later).
		if a.restarted(7, runs[i%len(runs)], t0.Add(-time.Second+time.Duration(i%2)*time.Second), now) {
			granted = append(granted, i)
		}
	}
	if !slices.Equal(granted, []int{0}) {
		t.Fatalf("5 servers in turn, 50 judgements: grace given at judgements %v, want [0]", granted)
	}
	// A restart after the last grace gives one; the servers before it none.
	later := t0.Add(time.Minute)
	if !a.restarted(7, "F", later.Add(-time.Second), later) {
		t.Fatal("a server started after the last grace gave none")
	}
	if a.restarted(7, "F", later.Add(500*time.Millisecond), later.Add(2*time.Second)) {
		t.Error("a run counted again, its start read after its grace (to the second)")
	}
	if a.restarted(7, "A", t0, later.Add(3*time.Second)) {
		t.Error("a server started before the last grace counted again")
	}
	// The memory is bounded.
	for i := range 2 * keptRuns {
		at := later.Add(time.Duration(i+1) * time.Minute)
		if !a.restarted(7, fmt.Sprint("r", i), at.Add(-time.Second), at) {
			t.Fatalf("new run r%d not counted", i)
		}
	}
	if len(a.runs[7]) != keptRuns || len(a.graced) != 1 {
		t.Errorf("%d runs kept (want %d), %d shards graced (want 1)", len(a.runs[7]), keptRuns, len(a.graced))
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
