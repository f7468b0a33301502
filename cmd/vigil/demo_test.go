package main

import (
	"slices"
	"strings"
	"testing"

	"github.com/vigil-dev/vigil/config"
)

// -chaos-queues names pools of the demo: every pool when empty, each
// named once, and a name that is not a pool is refused with the pools.
func TestDemoChaosQueues(t *testing.T) {
	cfg := config.Config{Pools: []config.Pool{{Queue: "tag"}, {Queue: "library"}, {Queue: "calibration"}}}
	for _, c := range []struct {
		list string
		want []string
	}{
		{"", []string{"tag", "library", "calibration"}},
		{" library , calibration,library", []string{"library", "calibration"}},
		{"tag", []string{"tag"}},
	} {
		got, err := demoChaosQueues(cfg, c.list)
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("demoChaosQueues(%q) = %v, %v; want %v", c.list, got, err, c.want)
		}
	}
	for _, list := range []string{"nope", "library,", "tag,../x"} {
		_, err := demoChaosQueues(cfg, list)
		if err == nil || !strings.Contains(err.Error(), "tag, library, calibration") {
			t.Errorf("demoChaosQueues(%q): %v, want an error naming the pools", list, err)
		}
	}
}
