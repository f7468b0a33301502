package supervisor

import (
	"sync"
	"syscall"
)

// groups holds the process groups of this supervisor's live children, so
// that Stop can SIGKILL every one still alive when its context ends, from
// any goroutine, whatever the monitor is doing. A child's group is added
// once it runs and removed as soon as Wait has reaped it (before then its
// pid cannot be reused, so a kill never reaches another process's group).
type groups struct {
	mu   sync.Mutex
	pids map[int]struct{}
}

func (g *groups) add(pid int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.pids == nil {
		g.pids = map[int]struct{}{}
	}
	g.pids[pid] = struct{}{}
}

func (g *groups) remove(pid int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.pids, pid)
}

// killAll SIGKILLs every group and returns how many there were.
func (g *groups) killAll() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	for pid := range g.pids {
		_ = syscall.Kill(-pid, syscall.SIGKILL)
	}
	return len(g.pids)
}
