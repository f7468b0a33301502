package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/health"
)

// sseMsg is one message of an event stream.
type sseMsg struct {
	ID, Event, Data string
	Comment         string
}

// event decodes the message's data.
func (m sseMsg) event(tb testing.TB) health.Event {
	tb.Helper()
	var e health.Event
	if err := json.Unmarshal([]byte(m.Data), &e); err != nil {
		tb.Fatalf("decode %q: %v", m.Data, err)
	}
	return e
}

// sseClient reads one GET /api/v1/events.
type sseClient struct {
	tb     testing.TB
	resp   *http.Response
	msgs   chan sseMsg
	cancel context.CancelFunc
	done   chan struct{}
	// err is how the response's body ended (nil: cleanly), set before
	// msgs is closed.
	err error
}

// serveHTTP serves h on a loopback port until the test ends (after its
// event clients are gone: cleanups run last-in first-out).
func serveHTTP(tb testing.TB, h http.Handler) string {
	tb.Helper()
	srv := httptest.NewServer(h)
	tb.Cleanup(srv.Close)
	return srv.URL
}

// subscribe opens an event stream on base with topics, resuming after
// lastID when set; it is closed when the test ends.
func subscribe(tb testing.TB, base string, topics []string, lastID string) *sseClient {
	tb.Helper()
	c, status := trySubscribe(tb, base, topics, lastID)
	if status != http.StatusOK {
		tb.Fatalf("GET /api/v1/events: %d", status)
	}
	return c
}

func trySubscribe(tb testing.TB, base string, topics []string, lastID string) (*sseClient, int) {
	tb.Helper()
	q := url.Values{"topic": topics}
	ctx, cancel := context.WithCancel(context.Background())
	r, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/api/v1/events?"+q.Encode(), nil)
	r.Header.Set("Authorization", "Bearer "+testToken)
	if lastID != "" {
		r.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := http.DefaultClient.Do(r)
	if err != nil {
		cancel()
		tb.Fatalf("GET /api/v1/events: %v", err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		cancel()
		return nil, resp.StatusCode
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		tb.Errorf("Content-Type %q", ct)
	}
	return newSSEClient(tb, resp, cancel), resp.StatusCode
}

// newSSEClient reads the event stream resp (whose request cancel ends)
// until the test ends.
func newSSEClient(tb testing.TB, resp *http.Response, cancel context.CancelFunc) *sseClient {
	c := &sseClient{tb: tb, resp: resp, msgs: make(chan sseMsg, 100_000), cancel: cancel, done: make(chan struct{})}
	go c.read()
	tb.Cleanup(c.close)
	return c
}

func (c *sseClient) read() {
	defer close(c.done)
	defer close(c.msgs)
	sc := bufio.NewScanner(c.resp.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	var m sseMsg
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if m != (sseMsg{}) {
				c.msgs <- m
			}
			m = sseMsg{}
		case strings.HasPrefix(line, ":"):
			m.Comment = strings.TrimSpace(line[1:])
		default:
			k, v, _ := strings.Cut(line, ": ")
			switch k {
			case "id":
				m.ID = v
			case "event":
				m.Event = v
			case "data":
				m.Data = v
			}
		}
	}
	c.err = sc.Err()
}

func (c *sseClient) close() {
	c.cancel()
	c.resp.Body.Close()
	<-c.done
}

// next returns the next message that is not a comment.
func (c *sseClient) next() sseMsg {
	c.tb.Helper()
	for {
		m := c.nextAny()
		if m.Comment == "" {
			return m
		}
	}
}

func (c *sseClient) nextAny() sseMsg {
	c.tb.Helper()
	select {
	case m, ok := <-c.msgs:
		if !ok {
			c.tb.Fatal("event stream ended")
		}
		return m
	case <-time.After(10 * time.Second):
		c.tb.Fatal("no event within 10 s")
	}
	return sseMsg{}
}

// nextOf skips messages of other types.
func (c *sseClient) nextOf(typ string) sseMsg {
	c.tb.Helper()
	for {
		if m := c.next(); m.Event == typ {
			return m
		}
	}
}

// ended waits for the stream to end (the server closed it).
func (c *sseClient) ended() bool {
	c.tb.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case _, ok := <-c.msgs:
			if !ok {
				return true
			}
		case <-deadline:
			return false
		}
	}
}

// lastID is the id of the stream's last entry.
func (h *harness) lastID() string {
	h.tb.Helper()
	msgs, err := h.redis.Client.XRevRangeN(ctx(h.tb), h.store.Keys().Events(), "+", "-", 1).Result()
	if err != nil || len(msgs) == 0 {
		h.tb.Fatalf("last stream entry: %v %v", msgs, err)
	}
	return msgs[0].ID
}

// emit appends an action event on topic and returns its id.
func (h *harness) emit(topic, result string) string {
	h.tb.Helper()
	id, err := h.store.AddEvent(ctx(h.tb), health.Event{Topic: topic, Type: health.EventAction, Timestamp: time.Now().UnixMilli(),
		Action: &health.ActionView{Action: "test", Target: topic, Result: result}})
	if err != nil {
		h.tb.Fatal(err)
	}
	return id
}
