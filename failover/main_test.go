package failover_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"
)

// The binaries the hosts run, built once by TestMain.
var vigilBin, workerBin string

func TestMain(m *testing.M) {
	if os.Getenv(envGate) == "" {
		os.Exit(m.Run()) // every test skips
	}
	dir, err := os.MkdirTemp("", "vigil-failover-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	vigilBin, workerBin = filepath.Join(dir, "vigil"), filepath.Join(dir, "chaosworker")
	for bin, pkg := range map[string]string{vigilBin: "../cmd/vigil", workerBin: "../chaos/internal/chaosworker"} {
		if out, err := exec.Command("go", "build", "-race", "-o", bin, pkg).CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "build %s: %v\n%s", pkg, err, out)
			os.RemoveAll(dir)
			os.Exit(1)
		}
	}
	code := m.Run()
	os.RemoveAll(dir)
	if code == 0 {
		// go-redis's redial loop of a pool whose node is dead sleeps a
		// second between tries and ends at the next one once the client is
		// closed (an in-process client after a master was killed).
		if err := goleak.Find(goleak.IgnoreTopFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).reaper"),
			goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial")); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}
