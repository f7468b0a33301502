package queue

import (
	"runtime/debug"
	"testing"
)

// Without VIGIL_VERSION, the binary's build info speaks.
func TestWorkerVersionFallsBackToBuildInfo(t *testing.T) {
	if got := workerVersion("v1"); got != "v1" {
		t.Errorf("workerVersion(v1) = %q", got)
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		t.Skip("no build info")
	}
	if got := workerVersion(""); got != bi.Main.Version {
		t.Errorf("workerVersion() = %q, want the build info's %q", got, bi.Main.Version)
	}
}
