package supervisor_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"
)

// testWorker is the path of the helper binary built from
// ./internal/testworker for the whole package run.
var testWorker string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "vigil-testworker")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	testWorker = filepath.Join(dir, "testworker")
	build := exec.Command("go", "build", "-o", testWorker, "./internal/testworker")
	build.Stdout, build.Stderr = os.Stdout, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build testworker:", err)
		os.Exit(2)
	}
	code := 0
	func() {
		defer os.RemoveAll(dir)
		goleak.VerifyTestMain(exitCapture{&code, m})
	}()
	os.Exit(code)
}

// exitCapture lets the temp dir be removed: goleak.VerifyTestMain calls
// os.Exit itself otherwise.
type exitCapture struct {
	code *int
	m    *testing.M
}

func (e exitCapture) Run() int { *e.code = e.m.Run(); return *e.code }
