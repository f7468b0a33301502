package policy_test

import (
	"fmt"
	"time"

	"github.com/vigil-dev/vigil/policy"
)

// The first worked example of docs/design.md §5: five crashes within five minutes.
func ExampleConfig_Decide() {
	c := policy.Config{}.WithDefaults()
	start := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	var s policy.State
	for _, at := range []time.Duration{0, 5 * time.Second, 15 * time.Second, 35 * time.Second, 70 * time.Second} {
		d := c.Decide(s, policy.Crash{At: start.Add(at)}, 0)
		s = d.State
		if d.Failed {
			fmt.Printf("%v: failed (%s), lifetime_restarts = %d\n", at, s.FailureReason, s.LifetimeRestarts)
			continue
		}
		fmt.Printf("%v: restart after %v\n", at, d.Delay)
	}
	// Output:
	// 0s: restart after 1s
	// 5s: restart after 2s
	// 15s: restart after 4s
	// 35s: restart after 8s
	// 1m10s: failed (rapid: 5 crashes within 5m0s), lifetime_restarts = 4
}
