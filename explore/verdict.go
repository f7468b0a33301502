package explore

import (
	"fmt"
	"sync"
)

// Invariants, by number (a violation names its invariant's number).
var invariants = map[int]string{
	1:  "never two live processes for one slot",
	2:  "every live worker is tracked by one supervisor whose host holds the slot's lease; no orphan outlives stop_timeout + 1s",
	3:  "a slot's record names its lease holder",
	4:  "no stuck slot",
	5:  "counters count only real crashes",
	6:  "every operator action and every Stop answers within stop_timeout + 2s and Stop leaves no child",
	7:  "every job completes exactly once or is archived with a cause its handler saw",
	8:  "no goroutine leak per supervisor",
	9:  "no data race in a supervisor (hosts run under the race detector)",
	10: "every tick of the seed's schedule is enqueued exactly once, and the leader keeps firing",
	0:  "the explorer could not run the seed",
}

// Violation is one broken invariant with its evidence.
type Violation struct {
	Invariant int
	Evidence  string
	At        string // the seed's clock when found
}

func (v Violation) String() string {
	return fmt.Sprintf("invariant %d (%s) at %s: %s", v.Invariant, invariants[v.Invariant], v.At, v.Evidence)
}

// verdict gathers a seed's violations (the first few of each invariant).
type verdict struct {
	mu   sync.Mutex
	list []Violation
	seen map[int]int
}

func (v *verdict) add(x Violation) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.seen == nil {
		v.seen = map[int]int{}
	}
	v.seen[x.Invariant]++
	if v.seen[x.Invariant] > 3 {
		return false
	}
	v.list = append(v.list, x)
	return true
}

func (v *verdict) all() []Violation {
	v.mu.Lock()
	defer v.mu.Unlock()
	return append([]Violation(nil), v.list...)
}

// violate records a violation found now.
func (w *world) violate(inv int, format string, args ...any) {
	x := Violation{Invariant: inv, Evidence: fmt.Sprintf(format, args...), At: w.clock()}
	if w.v.add(x) {
		w.b.logf("VIOLATION %s", x)
	}
}

func (w *world) clock() string {
	return fmt.Sprintf("+%.2fs", secondsSince(w.b.t0))
}
