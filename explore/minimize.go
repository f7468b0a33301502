package explore

import (
	"fmt"
	"slices"
)

// Minimize shrinks a failing seed's schedule: it drops steps one at a time
// (the last first) while the seed still breaks invariant inv, trying each
// candidate up to tries times (timing is real, so a failure may not come
// every time). It returns the indexes of the steps kept.
func Minimize(seed uint64, inv int, tries int, opts Options, sh *Shared, progress func(string)) []int {
	plan := Draw(seed, opts.Backend)
	keep := make([]int, len(plan.Steps))
	for i := range keep {
		keep[i] = i
	}
	fails := func(steps []int) bool {
		o := opts
		o.Only, o.Verbose = steps, false
		for range tries {
			r := RunSeed(seed, o, sh)
			for _, v := range r.Violations {
				if v.Invariant == inv {
					return true
				}
			}
		}
		return false
	}
	for i := len(keep) - 1; i >= 0; i-- {
		cand := slices.Delete(slices.Clone(keep), i, i+1)
		if fails(cand) {
			progress(fmt.Sprintf("dropped step %d (%s): still fails", keep[i], plan.Steps[keep[i]]))
			keep = cand
		} else {
			progress(fmt.Sprintf("kept step %d (%s)", keep[i], plan.Steps[keep[i]]))
		}
	}
	return keep
}
