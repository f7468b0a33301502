package chaos_test

import (
	"bufio"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// sseReader follows GET /api/v1/events as a browser's EventSource does:
// when the connection ends it comes back with Last-Event-ID. It records
// when each message arrived.
type sseReader struct {
	mu      sync.Mutex
	at      []time.Time
	resumes int
	refused int // answers other than 200
	stop    chan struct{}
	wg      sync.WaitGroup
	connMu  sync.Mutex
	conn    net.Conn
}

func readEvents(t *testing.T, h *host, query string) *sseReader {
	t.Helper()
	s := &sseReader{stop: make(chan struct{})}
	addr := strings.TrimPrefix(h.url, "http://")
	s.wg.Go(func() {
		lastID := ""
		for first := true; ; first = false {
			if !first {
				s.mu.Lock()
				s.resumes++
				s.mu.Unlock()
				select {
				case <-s.stop:
					return
				case <-time.After(100 * time.Millisecond): // EventSource's retry delay, shortened
				}
			}
			conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
			if err != nil {
				continue
			}
			s.connMu.Lock()
			s.conn = conn
			s.connMu.Unlock()
			select {
			case <-s.stop:
				conn.Close()
				return
			default:
			}
			hdr := ""
			if lastID != "" {
				hdr = "Last-Event-ID: " + lastID + "\r\n"
			}
			_, _ = conn.Write([]byte("GET /api/v1/events" + query + " HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + testToken + "\r\n" + hdr + "\r\n"))
			br := bufio.NewReader(conn)
			res, err := http.ReadResponse(br, nil)
			if err != nil || res.StatusCode != http.StatusOK {
				// 503 while Redis is away: try again (a browser's
				// EventSource gives up on an answer that is not 200; the
				// dashboard has to start a new one, as this does).
				s.mu.Lock()
				s.refused++
				s.mu.Unlock()
				conn.Close()
				continue
			}
			sc := scanLines(res.Body)
			for sc.Scan() {
				line := sc.Text()
				if id, ok := strings.CutPrefix(line, "id: "); ok {
					lastID = id
				}
				if strings.HasPrefix(line, "data: ") {
					s.mu.Lock()
					s.at = append(s.at, time.Now())
					s.mu.Unlock()
				}
			}
			conn.Close()
		}
	})
	t.Cleanup(s.close)
	return s
}

func (s *sseReader) close() {
	select {
	case <-s.stop:
		return
	default:
		close(s.stop)
	}
	s.connMu.Lock()
	if s.conn != nil {
		s.conn.Close()
	}
	s.connMu.Unlock()
	s.wg.Wait()
}

// resumed is how many times it came back, and how many of those were
// refused.
func (s *sseReader) resumed() (int, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.resumes, s.refused
}

// since counts the messages that arrived after t.
func (s *sseReader) since(t time.Time) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, a := range s.at {
		if a.After(t) {
			n++
		}
	}
	return n
}
