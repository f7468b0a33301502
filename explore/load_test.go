package explore

import (
	"testing"
	"time"
)

func TestLoadMeter(t *testing.T) {
	var m loadMeter
	m.late(10 * time.Millisecond)
	m.redis(overRedis + time.Millisecond) // one slow read is noise
	if over, why := m.overloaded(); over {
		t.Fatalf("overloaded after one slow read: %s", why)
	}
	m.redis(overRedis + time.Millisecond)
	if over, _ := m.overloaded(); !over {
		t.Fatal("two slow reads of a healthy Redis: not overloaded")
	}
	var n loadMeter
	n.late(overLate + time.Millisecond)
	if over, _ := n.overloaded(); !over {
		t.Fatal("a sampler woken late: not overloaded")
	}
	var k loadMeter
	k.reap(20 * time.Millisecond)
	if over, why := k.overloaded(); over {
		t.Fatalf("a host reaped in 20 ms: overloaded: %s", why)
	}
	k.reap(overReap + time.Millisecond)
	if over, _ := k.overloaded(); !over {
		t.Fatal("a SIGKILLed host reaped late: not overloaded")
	}
}

func TestLoadAverage(t *testing.T) {
	if v := loadAvg(); v < 0 {
		t.Fatalf("load average %v", v)
	}
	var m loadMeter
	m.load(100) // reported, not judged: the hosts' own lag is
	if over, why := m.overloaded(); over {
		t.Fatalf("a load average alone is overloaded: %s", why)
	}
	m.hostLag(overLate + time.Millisecond)
	if over, why := m.overloaded(); !over {
		t.Fatalf("a host that woke late is not overloaded: %s", why)
	}
}
