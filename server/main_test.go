package server_test

import (
	"testing"

	"github.com/vigil-dev/vigil/internal/testbin"
)

// vigilBin is ./cmd/vigil built once for the package: `vigil worker` is the
// pool command of the tests that need live workers.
var vigilBin string

func TestMain(m *testing.M) { testbin.Main(m, map[string]*string{"../cmd/vigil": &vigilBin}) }
