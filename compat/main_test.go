package compat_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/vigil-dev/vigil/internal/testbin"
)

// The binaries the suite runs: vigil itself and the pool's worker.
var vigilBin, workerBin string

func TestMain(m *testing.M) {
	if os.Getenv("VIGIL_TEST_REDIS_URL") == "" {
		goleak.VerifyTestMain(m) // the suite skips: build nothing
		return
	}
	testbin.Main(m, map[string]*string{"../cmd/vigil": &vigilBin, "./internal/compatworker": &workerBin})
}
