package ctl

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// errLimit ends the stream after --limit events.
var errLimit = errors.New("limit reached")

// sseMessage is one event of the stream (docs/design.md §8).
type sseMessage struct {
	ID    string          `json:"id"`
	Event string          `json:"event"`
	Data  json.RawMessage `json:"data"`
}

// events follows GET /api/v1/events: snapshots first, then every change.
// A dropped connection is resumed with Last-Event-ID (what was missed is
// replayed); it stops on Ctrl-C or after --limit events.
func (c *cli) events(ctx context.Context, topics []string) error {
	q := url.Values{}
	for _, t := range topics {
		q.Add("topic", t)
	}
	u := c.o.server + "/api/v1/events"
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	var last string
	seen := 0
	backoff := 500 * time.Millisecond
	for {
		n, err := c.stream(ctx, u, &last, &seen)
		switch {
		case errors.Is(err, errLimit):
			return nil
		case ctx.Err() != nil:
			return nil
		case err != nil && !retryable(err):
			return err
		}
		if n > 0 {
			backoff = 500 * time.Millisecond
		}
		fmt.Fprintf(c.errOut(), "vigil ctl: event stream ended (%v); reconnecting in %s\n", errOrEOF(err), backoff)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 10*time.Second)
	}
}

// retryError marks a failure worth reconnecting after.
type retryError struct{ err error }

func (e *retryError) Error() string { return e.err.Error() }
func (e *retryError) Unwrap() error { return e.err }

func retryable(err error) bool {
	var r *retryError
	return errors.As(err, &r)
}

func errOrEOF(err error) error {
	if err == nil {
		return io.EOF
	}
	return err
}

func (c *cli) errOut() io.Writer {
	if c.stderr != nil {
		return c.stderr
	}
	return io.Discard
}

// stream reads one connection; it returns how many events it printed.
func (c *cli) stream(ctx context.Context, u string, last *string, seen *int) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("User-Agent", "vigil-ctl")
	if c.o.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.o.token)
	}
	if *last != "" {
		req.Header.Set("Last-Event-ID", *last)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		if *last == "" {
			return 0, c.check(err, nil) // never connected: say so and stop
		}
		return 0, &retryError{err}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		err := c.check(nil, func() (*http.Response, []byte) { return resp, b })
		if resp.StatusCode == http.StatusServiceUnavailable {
			return 0, &retryError{err}
		}
		return 0, err
	}
	printed := 0
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	var m sseMessage
	var data []string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if len(data) > 0 {
				m.Data = json.RawMessage(strings.Join(data, "\n"))
				if m.ID != "" {
					*last = m.ID
				}
				if err := c.printEvent(m); err != nil {
					return printed, err
				}
				printed++
				*seen++
				if c.o.limit > 0 && *seen >= c.o.limit {
					return printed, errLimit
				}
			}
			m, data = sseMessage{}, nil
		case strings.HasPrefix(line, ":"): // comment (keep-alive)
		default:
			field, value, _ := strings.Cut(line, ":")
			value = strings.TrimPrefix(value, " ")
			switch field {
			case "id":
				m.ID = value
			case "event":
				m.Event = value
			case "data":
				data = append(data, value)
			}
		}
	}
	if err := sc.Err(); err != nil && ctx.Err() == nil {
		return printed, &retryError{err}
	}
	return printed, &retryError{io.EOF}
}

// eventData is what printEvent reads of an event's data.
type eventData struct {
	Topic     string `json:"topic"`
	Type      string `json:"type"`
	Timestamp int64  `json:"timestamp"`
	Worker    *struct {
		Status   string `json:"status"`
		PID      int    `json:"pid"`
		Reason   string `json:"reason"`
		ExitCode *int   `json:"exit_code"`
		Host     string `json:"host"`
	} `json:"worker"`
	Action *struct {
		Action, Target, Result string
	} `json:"action"`
	Data json.RawMessage `json:"data"`
}

func (c *cli) printEvent(m sseMessage) error {
	if c.o.json {
		b, err := json.Marshal(m)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(c.out, "%s\n", b)
		return err
	}
	var d eventData
	_ = json.Unmarshal(m.Data, &d)
	at := "-"
	if d.Timestamp > 0 {
		at = time.UnixMilli(d.Timestamp).Format("15:04:05.000")
	}
	_, err := fmt.Fprintf(c.out, "%s  %-13s %-28s %s\n", at, m.Event, d.Topic, summary(d))
	return err
}

// summary is one line about an event's payload.
func summary(d eventData) string {
	switch {
	case d.Worker != nil:
		s := d.Worker.Status
		if d.Worker.Host != "" {
			s += " on " + d.Worker.Host
		}
		if d.Worker.PID > 0 {
			s += fmt.Sprintf(" pid %d", d.Worker.PID)
		}
		if d.Worker.ExitCode != nil {
			s += fmt.Sprintf(" exit %d", *d.Worker.ExitCode)
		}
		if d.Worker.Reason != "" {
			s += " (" + d.Worker.Reason + ")"
		}
		return s
	case d.Action != nil:
		s := d.Action.Action + " " + d.Action.Target
		if d.Action.Result != "" {
			s += ": " + d.Action.Result
		}
		return s
	}
	var qs struct {
		Queue                                        *string
		Pending, Running, Retry, Archived, Completed int
		ProcessedTotal                               int `json:"processed_total"`
		FailedTotal                                  int `json:"failed_total"`
		Paused                                       bool
		PausedBy                                     string `json:"paused_by"`
		LiveWorkers                                  int    `json:"live_workers"`
	}
	if json.Unmarshal(d.Data, &qs) == nil && qs.Queue != nil && strings.HasPrefix(d.Topic, "queue:") && d.Topic != "queue:jobs" {
		s := fmt.Sprintf("%d pending, %d running, %d retry, %d archived, %d completed (kept), %d processed_total, %d failed_total, %d workers",
			qs.Pending, qs.Running, qs.Retry, qs.Archived, qs.Completed, qs.ProcessedTotal, qs.FailedTotal, qs.LiveWorkers)
		if qs.Paused {
			s += ", paused"
			if qs.PausedBy != "" {
				s += " by " + qs.PausedBy
			}
		}
		return s
	}
	var job struct {
		ID, State, Code string
		Type            string   `json:"task_type"`
		Progress        *float64 `json:"progress"`
	}
	if json.Unmarshal(d.Data, &job) == nil && job.State != "" {
		s := job.State + " " + job.Type + " " + job.ID
		if job.Progress != nil {
			s += fmt.Sprintf(" %.0f%%", *job.Progress)
		}
		if job.Code != "" {
			s += " " + job.Code
		}
		return s
	}
	s := string(d.Data)
	if len(s) > 160 {
		s = s[:160] + "…"
	}
	return s
}
