package chaos_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"
)

// Binaries built once for the package run when the suite is on: vigil from
// ./cmd/vigil (under -race when the tests are) and the pool command
// chaosworker from ./internal/chaosworker.
var vigilBin, workerBin string

func TestMain(m *testing.M) {
	if suiteMode() == modeOff {
		// Every test skips; nothing to build.
		goleak.VerifyTestMain(m)
		return
	}
	dir, err := os.MkdirTemp("", "vigil-chaos")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	vigilBin, workerBin = filepath.Join(dir, "vigil"), filepath.Join(dir, "chaosworker")
	builds := [][]string{{"build", "-o", workerBin, "./internal/chaosworker"}}
	if raceEnabled {
		builds = append(builds, []string{"build", "-race", "-o", vigilBin, "../cmd/vigil"})
	} else {
		builds = append(builds, []string{"build", "-o", vigilBin, "../cmd/vigil"})
	}
	for _, args := range builds {
		build := exec.Command("go", args...)
		build.Stdout, build.Stderr = os.Stdout, os.Stderr
		if err := build.Run(); err != nil {
			os.RemoveAll(dir)
			fmt.Fprintln(os.Stderr, "build test binaries:", err)
			os.Exit(2)
		}
	}
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		os.RemoveAll(dir)
		os.Exit(code)
	}))
}
