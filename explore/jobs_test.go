package explore

import (
	"testing"
	"time"
)

// The ledger's two-handlers report is a violation unless the first owner
// was a worker shutting down (it exited on its own).
func TestJudgeTwoHandlers(t *testing.T) {
	w := &world{v: &verdict{}, jobs: newJobBook(), b: newBook(time.Now(), nil)}
	v := ledgerView{
		violations: []string{"j1 started in 200 while 100 runs it", "j2 started in 300 while 101 runs it"},
		exits:      map[string]string{"100": "clean:0"},
	}
	st := w.judgeJobs(v)
	if st.ShutdownOverlaps != 1 {
		t.Fatalf("shutdown overlaps %d", st.ShutdownOverlaps)
	}
	vs := w.v.all()
	if len(vs) != 1 || vs[0].Invariant != 7 {
		t.Fatalf("violations %v", vs)
	}
}
