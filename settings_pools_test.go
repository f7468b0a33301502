package vigil

import (
	"testing"
	"time"

	"github.com/vigil-dev/vigil/health"
)

// The worker runtime's per-pool settings reach the workers' environment,
// where health.LoadWorkerEnv reads them back.
func TestSupervisorPoolsPassWorkerSettings(t *testing.T) {
	c, err := ParseSettings([]byte(`
pools:
  - queue: tag
    workers: 1
    command: [./w]
    env: {MODEL: small}
    keep_scratch_on_success: true
    backpressure: {high_watermark: 100, load_threshold: 1.5, pause_interval: 3s}
`))
	if err != nil {
		t.Fatal(err)
	}
	env := supervisorPools(c)[0].Env
	if env["MODEL"] != "small" {
		t.Fatalf("pool env lost: %v", env)
	}
	for k, v := range env {
		t.Setenv(k, v)
	}
	t.Setenv(health.EnvRedisURL, "redis://x")
	t.Setenv(health.EnvComponent, "worker:tag:0")
	we, err := health.LoadWorkerEnv()
	if err != nil {
		t.Fatal(err)
	}
	want := health.Backpressure{HighWatermark: 100, LoadThreshold: 1.5, PauseInterval: 3 * time.Second}
	if !we.KeepScratchOnSuccess || we.Backpressure != want {
		t.Fatalf("worker env %+v", we)
	}
	if c.Pools[0].Env["MODEL"] != "small" || len(c.Pools[0].Env) != 1 {
		t.Fatal("SupervisorPools changed the config's own env map")
	}
}
