package alert

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/vigil-dev/vigil/internal/clock"
)

// Defaults of Config.
const (
	TimeoutDefault   = 5 * time.Second
	RetriesDefault   = 3
	BackoffDefault   = time.Second
	QueueSizeDefault = 100
)

// Config configures a Webhook.
type Config struct {
	// URL is the webhook (http or https).
	URL string
	// Timeout bounds one attempt (TimeoutDefault).
	Timeout time.Duration
	// Retries is how many times a failed attempt is tried again
	// (RetriesDefault; negative: none). An attempt fails on a network error,
	// a timeout, a 5xx or a 429; another 4xx is not retried.
	Retries int
	// Backoff is the wait before the first retry, doubled after each
	// (BackoffDefault).
	Backoff time.Duration
	// QueueSize bounds the events waiting to be sent (QueueSizeDefault).
	QueueSize int
	Client    *http.Client
	Logger    *slog.Logger
	Clock     clock.Clock
	// OnResult, if set, is told each alert's fate: "sent", "failed" (for
	// good) or "dropped" (e.g. metrics.Metrics.Alert).
	OnResult func(result string)
}

// Webhook sends events to one URL. Start it, Notify it, Stop it.
type Webhook struct {
	cfg   Config
	queue chan item

	mu      sync.Mutex
	started bool
	stopped bool

	ctx    context.Context // cancelled when Stop gives up on the queue
	cancel context.CancelFunc
	done   chan struct{}

	stats counts
}

type item struct {
	kind string
	body []byte
}

// counts are what a Webhook did.
type counts struct {
	mu                    sync.Mutex
	Sent, Failed, Dropped int64
	Attempts              int64
}

// New checks cfg and returns a webhook (not started).
func New(cfg Config) (*Webhook, error) {
	u, err := url.Parse(cfg.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("alerts.webhook %q: want an http:// or https:// URL", cfg.URL)
	}
	cfg.Timeout = cmp.Or(cfg.Timeout, TimeoutDefault)
	cfg.Backoff = cmp.Or(cfg.Backoff, BackoffDefault)
	cfg.QueueSize = cmp.Or(cfg.QueueSize, QueueSizeDefault)
	if cfg.Retries == 0 {
		cfg.Retries = RetriesDefault
	}
	cfg.Retries = max(cfg.Retries, 0)
	if cfg.Client == nil {
		cfg.Client = &http.Client{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Webhook{cfg: cfg, queue: make(chan item, cfg.QueueSize), ctx: ctx, cancel: cancel, done: make(chan struct{})}, nil
}

// Start starts the sending goroutine. Safe twice.
func (w *Webhook) Start() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started || w.stopped {
		return
	}
	w.started = true
	go w.run()
}

// Notify queues ev (marshalled to JSON) to be sent, and returns at once. It
// returns false, and logs why, when the event is dropped: the queue is full
// or the webhook stopped.
func (w *Webhook) Notify(kind string, ev any) bool {
	body, err := json.Marshal(ev)
	if err != nil {
		w.cfg.Logger.Error("alert not sent: cannot encode the event", "alert", kind, "err", err)
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		w.drop(kind, "the alert sender has stopped")
		return false
	}
	select {
	case w.queue <- item{kind: kind, body: body}:
		return true
	default:
		w.drop(kind, fmt.Sprintf("%d alerts are already waiting", cap(w.queue)))
		return false
	}
}

func (w *Webhook) drop(kind, why string) {
	w.stats.add(&w.stats.Dropped)
	w.result("dropped")
	w.cfg.Logger.Warn("alert dropped: "+why, "alert", kind, "webhook", redact(w.cfg.URL))
}

// Stop stops accepting events, sends those still queued until ctx ends,
// then abandons the rest (logged) and returns once the goroutine has.
// Safe before Start and twice.
func (w *Webhook) Stop(ctx context.Context) error {
	w.mu.Lock()
	if w.stopped {
		w.mu.Unlock()
		if w.started {
			<-w.done
		}
		return nil
	}
	w.stopped = true
	close(w.queue)
	started := w.started
	w.mu.Unlock()
	if !started {
		w.cancel()
		return nil
	}
	select {
	case <-w.done:
		w.cancel()
		return nil
	case <-ctx.Done():
		w.cancel()
		<-w.done
		return ctx.Err()
	}
}

// Stats returns how many alerts were sent, failed for good and dropped,
// and how many attempts were made.
func (w *Webhook) Stats() (sent, failed, dropped, attempts int64) {
	w.stats.mu.Lock()
	defer w.stats.mu.Unlock()
	return w.stats.Sent, w.stats.Failed, w.stats.Dropped, w.stats.Attempts
}

func (s *counts) add(n *int64) {
	s.mu.Lock()
	*n++
	s.mu.Unlock()
}

func (w *Webhook) run() {
	defer close(w.done)
	for it := range w.queue {
		if w.ctx.Err() != nil {
			w.stats.add(&w.stats.Dropped)
			w.result("dropped")
			w.cfg.Logger.Warn("alert dropped: shutting down", "alert", it.kind)
			continue
		}
		w.send(it)
	}
}

// send tries it until it is delivered, fails for good, or the webhook is
// abandoned.
func (w *Webhook) send(it item) {
	delay := w.cfg.Backoff
	for attempt := 0; ; attempt++ {
		err := w.post(it)
		if err == nil {
			w.stats.add(&w.stats.Sent)
			w.result("sent")
			w.cfg.Logger.Info("alert sent", "alert", it.kind, "attempts", attempt+1)
			return
		}
		var perm *permanentError
		final := errors.As(err, &perm) || attempt >= w.cfg.Retries || w.ctx.Err() != nil
		if final {
			w.stats.add(&w.stats.Failed)
			w.result("failed")
			w.cfg.Logger.Error("alert not delivered", "alert", it.kind, "webhook", redact(w.cfg.URL), "attempts", attempt+1, "err", err)
			return
		}
		w.cfg.Logger.Warn("alert attempt failed; retrying", "alert", it.kind, "attempt", attempt+1, "retry_in", delay, "err", err)
		wake := make(chan struct{})
		t := w.cfg.Clock.AfterFunc(delay, func() { close(wake) })
		select {
		case <-wake:
		case <-w.ctx.Done():
			t.Stop()
		}
		delay *= 2
	}
}

func (w *Webhook) result(r string) {
	if w.cfg.OnResult != nil {
		w.cfg.OnResult(r)
	}
}

type permanentError struct{ status int }

func (e *permanentError) Error() string {
	return fmt.Sprintf("webhook answered %d (not retried)", e.status)
}

// post makes one attempt.
func (w *Webhook) post(it item) error {
	w.stats.add(&w.stats.Attempts)
	ctx, cancel := context.WithTimeout(w.ctx, w.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.cfg.URL, bytes.NewReader(it.body))
	if err != nil {
		return &permanentError{}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "vigil-alerts")
	req.Header.Set("X-Vigil-Alert", it.kind)
	resp, err := w.cfg.Client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	switch {
	case resp.StatusCode < 300:
		return nil
	case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500:
		return fmt.Errorf("webhook answered %d", resp.StatusCode)
	}
	return &permanentError{status: resp.StatusCode}
}

// redact drops a URL's credentials and query (tokens often live there).
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "webhook"
	}
	u.User, u.RawQuery = nil, ""
	return u.String()
}
