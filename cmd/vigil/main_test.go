package main

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain also makes the test binary a demo worker (`vigil worker
// --demo`) when a test's pool starts it with envTestWorker set, so that
// end-to-end tests need no build of their own.
func TestMain(m *testing.M) {
	if os.Getenv(envTestWorker) == "1" {
		os.Exit(run([]string{"worker", "--demo"}, os.Stdout, os.Stderr))
	}
	goleak.VerifyTestMain(m)
}
