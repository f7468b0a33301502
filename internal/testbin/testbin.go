// Package testbin builds the helper binaries a package's tests run as real
// child processes, once per test binary, and runs the tests under goleak.
package testbin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"
)

// Main builds each Go package of bins (a path relative to the test's
// package, e.g. "../cmd/vigil", mapped to the variable that receives the
// binary's path) into a temporary folder, runs the tests, checks for
// leaked goroutines, removes the folder and exits.
func Main(m *testing.M, bins map[string]*string, opts ...goleak.Option) {
	dir, err := os.MkdirTemp("", "vigil-testbin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	for pkg, dst := range bins {
		*dst = filepath.Join(dir, filepath.Base(pkg))
		build := exec.Command("go", "build", "-o", *dst, pkg)
		build.Stdout, build.Stderr = os.Stdout, os.Stderr
		if err := build.Run(); err != nil {
			os.RemoveAll(dir)
			fmt.Fprintf(os.Stderr, "build %s: %v\n", pkg, err)
			os.Exit(2)
		}
	}
	goleak.VerifyTestMain(m, append(opts, goleak.Cleanup(func(code int) {
		os.RemoveAll(dir)
		os.Exit(code)
	}))...)
}
