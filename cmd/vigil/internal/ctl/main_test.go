package ctl_test

import (
	"testing"

	"github.com/vigil-dev/vigil/internal/testbin"
)

// testWorker is the supervisor tests' child process (mode "beat").
var testWorker string

func TestMain(m *testing.M) {
	testbin.Main(m, map[string]*string{"../../../../supervisor/internal/testworker": &testWorker})
}
