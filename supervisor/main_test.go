package supervisor_test

import (
	"testing"

	"github.com/vigil-dev/vigil/internal/testbin"
)

// testWorker is built from ./internal/testworker (the children),
// testSupervisor from ./internal/testsupervisor (a supervisor in a process
// of its own).
var testWorker, testSupervisor string

func TestMain(m *testing.M) {
	testbin.Main(m, map[string]*string{"./internal/testworker": &testWorker, "./internal/testsupervisor": &testSupervisor})
}
