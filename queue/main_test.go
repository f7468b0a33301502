package queue_test

import (
	"testing"

	"github.com/vigil-dev/vigil/internal/testbin"
)

// testJobWorker is ./internal/testjobworker, built once for the package
// run: the worker processes of the tests that kill workers.
var testJobWorker string

func TestMain(m *testing.M) {
	testbin.Main(m, map[string]*string{"./internal/testjobworker": &testJobWorker})
}
