package chaos_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/vigil-dev/vigil/internal/testredis"
)

// mode is how much of the suite runs.
type mode int

const (
	modeOff   mode = iota // make test (miniredis): everything skips
	modeShort             // make test-redis: the short variants of scenarios 1, 3, 5, 6 and the hostile-input tests
	modeLong              // make chaos: every scenario at full size
)

// Environment of the suite.
const (
	envChaos  = "VIGIL_CHAOS"        // "1": the whole suite at full size (make chaos)
	envOutage = "VIGIL_CHAOS_OUTAGE" // how long scenario 5 keeps Redis down (default 60s, short variant 2s)
	envLogs   = "VIGIL_CHAOS_LOGS"   // a folder: every host's whole log is written there
)

func suiteMode() mode {
	switch {
	case os.Getenv(envChaos) == "1":
		return modeLong
	case testredis.Real():
		return modeShort
	}
	return modeOff
}

// need skips the test unless the suite runs at least at m, and returns the
// mode it runs at.
func need(t *testing.T, m mode) mode {
	t.Helper()
	got := suiteMode()
	switch {
	case got == modeOff:
		t.Skipf("chaos suite off: set %s (make test-redis) for the short variants, %s=1 (make chaos) for all", testredis.EnvURL, envChaos)
	case got < m:
		t.Skipf("long scenario: runs with %s=1 (make chaos)", envChaos)
	}
	return got
}

// pick returns short or long by the suite's mode.
func pick[T any](short, long T) T {
	if suiteMode() == modeLong {
		return long
	}
	return short
}

// outageLength is how long scenario 5 keeps Redis down.
func outageLength(t *testing.T) time.Duration {
	t.Helper()
	d := pick(2*time.Second, 60*time.Second)
	if v := os.Getenv(envOutage); v != "" {
		var err error
		if d, err = time.ParseDuration(v); err != nil || d <= 0 {
			t.Fatalf("%s=%q: want a duration such as 60s", envOutage, v)
		}
	}
	return d
}

// redisProc is a redis-server process of the test's own with a client.
type redisProc struct {
	*testredis.Server
	c *redis.Client
}

func newRedis(t *testing.T) *redisProc {
	t.Helper()
	srv := testredis.StartServer(t)
	opt, err := redis.ParseURL(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	// Short timeouts and few retries: the tests take this server away.
	opt.DialTimeout, opt.ReadTimeout, opt.WriteTimeout, opt.MaxRetries = time.Second, 5*time.Second, 5*time.Second, 1
	c := redis.NewClient(opt)
	t.Cleanup(func() { _ = c.Close() })
	return &redisProc{Server: srv, c: c}
}

// restartKeepingData saves everything and stops the server (SHUTDOWN SAVE,
// so that no write is lost between a SAVE and the stop), then starts it
// again with its data.
func (r *redisProc) restartKeepingData(t *testing.T, down time.Duration, during func()) {
	t.Helper()
	r.shutdownSave(t)
	end := time.Now().Add(down)
	if during != nil {
		during()
	}
	// The outage's length is the scenario's input: wall time passing.
	<-time.After(time.Until(end))
	r.Start()
}

// shutdownSave stops the server after writing its data to disk.
func (r *redisProc) shutdownSave(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// The server closes the connection as it exits: an error is the norm.
	_ = r.c.ShutdownSave(ctx).Err()
	r.Stop() // reaps it
}

// restartLosingData kills the server and starts it empty.
func (r *redisProc) restartLosingData(t *testing.T) {
	t.Helper()
	r.Stop()
	r.Wipe()
	r.Start()
}
