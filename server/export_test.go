package server

import "github.com/vigil-dev/vigil/internal/clock"

// SetHistoryScanMax lowers the most stream entries one history request
// reads, until the returned function restores it (tests are not parallel).
func SetHistoryScanMax(n int) (restore func()) {
	old := historyScanMax
	historyScanMax = n
	return func() { historyScanMax = old }
}

// EventStreams returns the r3labs/sse stream of each pattern set the broker
// serves, whether each exists in r3labs/sse, and a channel closed when a
// client next comes, leaves or catches up.
func EventStreams(s *Server) (streams map[string]bool, left <-chan struct{}) {
	b := s.broker
	b.mu.Lock()
	defer b.mu.Unlock()
	streams = map[string]bool{}
	for _, g := range b.groups {
		streams[g.stream] = b.sse.StreamExists(g.stream)
	}
	return streams, b.moved
}

// StreamExists reports whether r3labs/sse has the stream id.
func StreamExists(s *Server, id string) bool { return s.broker.sse.StreamExists(id) }

// SetWatchdogClock moves the broker's watchdog to c (it looks at the
// clients every StallCheck of c).
func SetWatchdogClock(s *Server, c clock.Clock) {
	b := s.broker
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.watch != nil {
		b.watch.Stop()
	}
	b.wclock = c
	b.watch = c.AfterFunc(stallCheck, b.watchdog)
}

// StallCheck is the watchdog's period.
const StallCheck = stallCheck

// Catching returns how many clients are still catching up (they read the
// stream on their own: an entry may reach them before the broker's own
// read) and a channel closed when a client next comes, leaves or catches up.
func Catching(s *Server) (n int, moved <-chan struct{}) {
	b := s.broker
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.catching), b.moved
}
