package health_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails a passing run that leaves goroutines behind. Every test
// closes its Redis clients (testredis registers Close as a cleanup), so
// go-redis's pool goroutines need no exemption.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
