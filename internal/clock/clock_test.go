package clock_test

import (
	"testing"
	"time"

	"github.com/vigil-dev/vigil/internal/clock"
)

var _ clock.Clock = clock.Real{}

func TestRealNow(t *testing.T) {
	before := time.Now()
	got := clock.Real{}.Now()
	after := time.Now()
	if got.Before(before) || got.After(after) {
		t.Errorf("Real.Now() = %v, want within [%v, %v]", got, before, after)
	}
}

func TestRealAfterFunc(t *testing.T) {
	ran := make(chan struct{})
	clock.Real{}.AfterFunc(0, func() { close(ran) })
	receive(t, ran)

	tm := clock.Real{}.AfterFunc(time.Hour, func() { t.Error("stopped timer ran") })
	if !tm.Stop() {
		t.Error("Stop() of a pending timer = false, want true")
	}
	if tm.Stop() {
		t.Error("second Stop() = true, want false")
	}
}
