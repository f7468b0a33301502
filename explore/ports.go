package explore

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
)

// ports hands out the TCP ports of the redis-server processes the
// explorer starts: any free port (the kernel's choice), or, when a range
// is given (-ports 6550-6649, for a machine where others start Redis
// servers too), the free ports of that range only. A port handed out is
// not handed out again until it is given back.
type ports struct {
	mu     sync.Mutex
	lo, hi int // 0: any free port
	next   int
	inUse  map[int]bool
}

// ParsePorts reads "lo-hi" ("" = any free port).
func ParsePorts(s string) (lo, hi int, err error) {
	if s == "" {
		return 0, 0, nil
	}
	a, b, ok := strings.Cut(s, "-")
	lo, err1 := strconv.Atoi(strings.TrimSpace(a))
	hi, err2 := strconv.Atoi(strings.TrimSpace(b))
	if !ok || err1 != nil || err2 != nil || lo <= 0 || hi < lo || hi > 65535 {
		return 0, 0, fmt.Errorf("ports %q: want lo-hi, e.g. 6550-6649", s)
	}
	return lo, hi, nil
}

// SetPorts makes the explorer start its Redis servers on the free ports
// of lo..hi only (0, 0: any free port).
func (s *Shared) SetPorts(lo, hi int) {
	s.ports.mu.Lock()
	defer s.ports.mu.Unlock()
	s.ports.lo, s.ports.hi, s.ports.next = lo, hi, lo
}

var errNoPort = errors.New("no free port left in the explorer's range")

// take returns n ports free now (not all consecutive).
func (p *ports) take(n int) ([]int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.inUse == nil {
		p.inUse = map[int]bool{}
	}
	var out []int
	give := func() {
		for _, x := range out {
			delete(p.inUse, x)
		}
	}
	for len(out) < n {
		var port int
		if p.lo == 0 {
			x, err := freePort()
			if err != nil {
				give()
				return nil, err
			}
			if p.inUse[x] {
				continue
			}
			port = x
		} else {
			for tries := 0; tries <= p.hi-p.lo && port == 0; tries++ {
				x := p.next
				if p.next++; p.next > p.hi {
					p.next = p.lo
				}
				if !p.inUse[x] && portFree(x) {
					port = x
				}
			}
			if port == 0 {
				give()
				return nil, errNoPort
			}
		}
		p.inUse[port] = true
		out = append(out, port)
	}
	return out, nil
}

// give returns ports taken.
func (p *ports) give(ps []int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, x := range ps {
		delete(p.inUse, x)
	}
}

func portFree(port int) bool {
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		return false
	}
	_ = l.Close()
	return true
}
