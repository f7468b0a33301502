package supervisor_test

import (
	"strings"
	"testing"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/policy"
	"github.com/vigil-dev/vigil/supervisor"
)

// TestWorkerEnvironmentIsAnAllowlist: a worker gets PATH, HOME, LANG, TZ,
// USER, the names of inherit_env, its pool's env and its VIGIL_* variables,
// and nothing else of the supervisor's environment: not the admin token,
// not unrelated secrets (issue 18, row 1).
func TestWorkerEnvironmentIsAnAllowlist(t *testing.T) {
	t.Setenv("VIGIL_TOKEN", "supervisor-token-0123456789")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "unrelated-secret")
	t.Setenv("LANG", "C.UTF-8")
	t.Setenv("EXTRA_ALLOWED", "yes")
	t.Setenv("LC_TEST_ONE", "one")
	h := newHarness(t, supervisor.Config{
		Pools: []supervisor.Pool{{Queue: "q", Workers: 1, Command: []string{"sh", "-c", "env; exit 3"},
			Env: map[string]string{"MODEL": "small"}}},
		InheritEnv: []string{"EXTRA_ALLOWED", "LC_TEST_*"},
		Policy:     policy.Config{MaxInWindow: 1},
	})
	h.start()
	id := health.ComponentID{Queue: "q"}
	h.waitFor(id, isStatus(health.StatusFailed))
	got := map[string]string{}
	for _, l := range h.sup.Logs(id) {
		if k, v, ok := strings.Cut(l, "="); ok {
			got[k] = v
		}
	}
	allowed := map[string]bool{"PATH": true, "HOME": true, "LANG": true, "TZ": true, "USER": true,
		"MODEL": true, "EXTRA_ALLOWED": true, "LC_TEST_ONE": true,
		"PWD": true, "SHLVL": true, "_": true} // the last three: set by sh itself
	for k := range got {
		if !allowed[k] && !strings.HasPrefix(k, "VIGIL_") {
			t.Errorf("worker environment holds %s", k)
		}
	}
	if got["VIGIL_TOKEN"] != "" || got["AWS_SECRET_ACCESS_KEY"] != "" {
		t.Errorf("worker environment holds a secret of the supervisor: %v", got)
	}
	for k, v := range map[string]string{"MODEL": "small", "LANG": "C.UTF-8", "EXTRA_ALLOWED": "yes", "LC_TEST_ONE": "one",
		health.EnvComponent: "worker:q:0"} {
		if got[k] != v {
			t.Errorf("worker environment: %s=%q, want %q", k, got[k], v)
		}
	}
	if got["PATH"] == "" {
		t.Error("worker environment has no PATH")
	}
}
