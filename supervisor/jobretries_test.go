package supervisor_test

import (
	"bytes"
	"os"
	"strconv"
	"testing"

	"github.com/vigil-dev/vigil/config"
	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/supervisor"
)

// TestExplicitZeroJobCrashRetriesReachesWorkers (issue 12, defect 7):
// job_crash_retries: 0 in the file ("toxic after the first crash") reaches
// the workers as 0, not as the default 2, through the configuration and
// the supervisor's own defaults.
func TestExplicitZeroJobCrashRetriesReachesWorkers(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		yaml string
		want string
	}{
		{"policy: {job_crash_retries: 0}\n", "0"},
		{"policy: {job_crash_retries: 5}\n", "5"},
		{"lease: 15s\n", "2"},
	} {
		cfg, err := config.Parse([]byte(tt.yaml))
		if err != nil {
			t.Fatal(err)
		}
		h := newHarness(t, supervisor.Config{
			Pools:  []supervisor.Pool{{Queue: "q", Workers: 1, Command: []string{testWorker, "beat"}}},
			Policy: cfg.PolicyConfig(),
		})
		h.start()
		pid := h.waitFor(health.ComponentID{Queue: "q"}, isStatus(health.StatusHealthy)).PID
		env, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
		if err != nil {
			t.Fatal(err)
		}
		want := health.EnvJobCrashRetries + "=" + tt.want
		if !bytes.Contains(append([]byte{0}, env...), []byte("\x00"+want+"\x00")) {
			t.Errorf("%q: the worker's environment lacks %s", tt.yaml, want)
		}
	}
}
