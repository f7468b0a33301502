package supervisor_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"
)

// Helper binaries built once for the whole package run: testWorker from
// ./internal/testworker (the children), testSupervisor from
// ./internal/testsupervisor (a supervisor in a process of its own).
var testWorker, testSupervisor string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "vigil-testworker")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	testWorker = filepath.Join(dir, "testworker")
	testSupervisor = filepath.Join(dir, "testsupervisor")
	build := exec.Command("go", "build", "-o", dir, "./internal/testworker", "./internal/testsupervisor")
	build.Stdout, build.Stderr = os.Stdout, os.Stderr
	if err := build.Run(); err != nil {
		os.RemoveAll(dir)
		fmt.Fprintln(os.Stderr, "build test helpers:", err)
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
