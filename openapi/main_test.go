package openapi_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"
)

// vigilBin is ./cmd/vigil built once: `vigil worker` is the pool command of
// the end-to-end test.
var vigilBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "vigil-openapi-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	vigilBin = filepath.Join(dir, "vigil")
	build := exec.Command("go", "build", "-o", vigilBin, "../cmd/vigil")
	build.Stdout, build.Stderr = os.Stdout, os.Stderr
	if err := build.Run(); err != nil {
		os.RemoveAll(dir)
		fmt.Fprintln(os.Stderr, "build vigil:", err)
		os.Exit(2)
	}
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		os.RemoveAll(dir)
		os.Exit(code)
	}))
}
