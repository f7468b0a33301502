package openapi_test

import (
	"testing"

	"github.com/vigil-dev/vigil/internal/testbin"
)

// vigilBin is ./cmd/vigil built once: `vigil worker` is the pool command of
// the end-to-end test.
var vigilBin string

func TestMain(m *testing.M) { testbin.Main(m, map[string]*string{"../cmd/vigil": &vigilBin}) }
