package faultproxy_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails a passing run that leaves goroutines behind: every proxy
// and client a test opens is closed by its cleanups.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
