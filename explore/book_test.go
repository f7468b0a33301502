package explore

import (
	"testing"
	"time"
)

func TestBookWindows(t *testing.T) {
	t0 := time.Now()
	b := newBook(t0, nil)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	b.windows = []*window{
		{host: "h1", from: at(1000), to: at(2000), why: "partition"},
		{host: "", from: at(5000), to: at(5000), why: "flush"},
		{host: "h2", from: at(8000), why: "open"},
	}
	grace := 500 * time.Millisecond
	for _, c := range []struct {
		name      string
		host      string
		from, to  int
		disturbed bool
		born, now int
		excused   bool
	}{
		{"during h1's partition", "h1", 1500, 1500, true, 500, 1500, true},
		{"h1 within the grace", "h1", 2400, 2400, true, 500, 2400, true},
		{"h1 after the grace", "h1", 2600, 2600, false, 500, 2600, false},
		{"h0 never cut", "h0", 1500, 1500, false, 500, 1500, false},
		{"a span over h1's partition", "h1", 0, 3000, true, 500, 3000, false},
		{"h1 process born after the partition", "h1", 2100, 2100, true, 2050, 2100, false},
		{"a flush touches every host", "h0", 5100, 5100, true, 4000, 5100, true},
		{"an open window", "h2", 9000, 9000, true, 100, 9000, true},
		{"an open window, process born after it opened", "h2", 9000, 9000, true, 8500, 9000, true},
	} {
		if got := b.disturbed(c.host, at(c.from), at(c.to), grace); got != c.disturbed {
			t.Errorf("%s: disturbed %v", c.name, got)
		}
		if got := b.excuses(c.host, at(c.born), at(c.now), grace); got != c.excused {
			t.Errorf("%s: excuses %v", c.name, got)
		}
	}
	b.windows = append(b.windows, &window{host: "h1", from: at(1500), to: at(1600), why: whyStopped})
	if !b.stoppedCut("h1", at(0), at(3000)) || b.stoppedCut("h0", at(0), at(3000)) || b.stoppedCut("h1", at(2100), at(3000)) {
		t.Error("stoppedCut")
	}
	b.windows = b.windows[:3]
	if !b.anyDisturbed(at(1900), at(1950)) || b.anyDisturbed(at(2100), at(4900)) || !b.anyDisturbed(at(4000), at(6000)) {
		t.Error("anyDisturbed")
	}
	before := time.Now()
	if q := b.quietSince(); q.Before(before) {
		t.Errorf("quietSince %s with a window open", q.Sub(t0))
	}
	b.close(b.windows[2])
	b.windows[2].to = at(8100)
	if q := b.quietSince(); !q.Equal(at(8100)) {
		t.Errorf("quietSince %s, want the last window's end", q.Sub(t0))
	}
}

// A failover's window is a disturbance, but not one that disturbedBut
// counts when told to leave it out (it excuses no job run twice).
func TestBookFailoverWindowLeftOut(t *testing.T) {
	t0 := time.Now()
	b := newBook(t0, nil)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	b.windows = []*window{
		{host: "", from: at(1000), to: at(2000), why: whyFailover},
		{host: "h1", from: at(3000), to: at(4000), why: "partition"},
	}
	if !b.disturbed("h0", at(0), at(2500), 0) || b.disturbedBut("h0", at(0), at(2500), 0, whyFailover) {
		t.Fatal("h0 during the failover: disturbed, but not leaving the failover out")
	}
	if !b.disturbedBut("h1", at(0), at(5000), 0, whyFailover) {
		t.Fatal("h1's partition is still counted")
	}
}
