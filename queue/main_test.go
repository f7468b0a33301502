package queue_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"
)

// testJobWorker is ./internal/testjobworker, built once for the package
// run: the worker processes of the tests that kill workers.
var testJobWorker string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "vigil-testjobworker")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	testJobWorker = filepath.Join(dir, "testjobworker")
	build := exec.Command("go", "build", "-o", testJobWorker, "./internal/testjobworker")
	build.Stdout, build.Stderr = os.Stdout, os.Stderr
	if err := build.Run(); err != nil {
		os.RemoveAll(dir)
		fmt.Fprintln(os.Stderr, "build test worker:", err)
		os.Exit(2)
	}
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		os.RemoveAll(dir)
		os.Exit(code)
	}))
}
