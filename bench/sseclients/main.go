// Command sseclients is the client side of the event fan-out benchmark
// (server's BenchmarkEventFanout): many SSE clients in a process of their
// own, so that the server's process measures only the server.
//
//	sseclients -url http://127.0.0.1:8080/api/v1/events?topic=worker:*:status -n 1000 -events 100
//
// It opens n connections and prints "ready" once every one has its
// response headers. The driver then sends events whose data holds
// "@<index>:<unix ns when sent>@". Once every client has event i it prints
// "got <i>", so that the driver can send the next one alone. At the end it
// prints one JSON line of latencies (sent → read by the client) in
// microseconds: over every delivery, and over each event's slowest
// delivery.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/url"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Result is the JSON line printed at the end.
type Result struct {
	Clients    int   `json:"clients"`
	Events     int   `json:"events"`
	Deliveries int   `json:"deliveries"`
	Missing    int   `json:"missing"`
	P50        int64 `json:"p50_us"`
	P90        int64 `json:"p90_us"`
	P99        int64 `json:"p99_us"`
	Max        int64 `json:"max_us"`
	// Of each event's slowest delivery (the time until every client had it).
	LastP50 int64 `json:"last_p50_us"`
	LastP99 int64 `json:"last_p99_us"`
}

func main() {
	rawURL := flag.String("url", "", "event stream URL")
	n := flag.Int("n", 1000, "clients")
	events := flag.Int("events", 100, "events to wait for")
	timeout := flag.Duration("timeout", 5*time.Minute, "give up after")
	flag.Parse()
	u, err := url.Parse(*rawURL)
	if err != nil || u.Host == "" {
		fmt.Fprintln(os.Stderr, "sseclients: -url must be an http URL")
		os.Exit(2)
	}
	s := &swarm{events: *events, got: make([]atomic.Int32, *events), lat: make([][]int64, *n), last: make([]atomic.Int64, *events)}
	var ready sync.WaitGroup
	ready.Add(*n)
	dial := make(chan struct{}, 256) // at most this many connects at once
	errs := make(chan error, *n)
	for i := range *n {
		s.stored.Add(1)
		go func() {
			defer s.stored.Done()
			dial <- struct{}{}
			err := s.client(i, u, func() { <-dial; ready.Done() })
			if err != nil {
				errs <- fmt.Errorf("client %d: %w", i, err)
			}
		}()
	}
	readyCh := make(chan struct{})
	go func() { ready.Wait(); close(readyCh) }()
	select {
	case <-readyCh:
	case err := <-errs:
		fmt.Fprintln(os.Stderr, "sseclients:", err)
		os.Exit(1)
	case <-time.After(*timeout):
		fmt.Fprintln(os.Stderr, "sseclients: not all clients connected in time")
		os.Exit(1)
	}
	fmt.Println("ready")
	deadline := time.After(*timeout)
	for i := range *events {
		for {
			wake := s.progress() // before the check, so that no delivery is missed
			if s.got[i].Load() >= int32(*n) {
				break
			}
			select {
			case <-wake:
			case <-deadline:
				fmt.Fprintf(os.Stderr, "sseclients: event %d reached %d of %d clients in time\n", i, s.got[i].Load(), *n)
				s.report(*n)
				os.Exit(1)
			}
		}
		fmt.Println("got", i)
	}
	// A client counts its last delivery before it stores its latencies.
	s.stored.Wait()
	s.report(*n)
}

type swarm struct {
	stored sync.WaitGroup // clients that have not stored their latencies
	events int
	got    []atomic.Int32 // clients that have event i
	last   []atomic.Int64 // slowest delivery of event i (µs)
	mu     sync.Mutex
	lat    [][]int64 // per client
	wake   chan struct{}
	wakeMu sync.Mutex
}

// progress returns a channel closed at the next delivery.
func (s *swarm) progress() <-chan struct{} {
	s.wakeMu.Lock()
	defer s.wakeMu.Unlock()
	if s.wake == nil {
		s.wake = make(chan struct{})
	}
	return s.wake
}

func (s *swarm) delivered() {
	s.wakeMu.Lock()
	if s.wake != nil {
		close(s.wake)
		s.wake = nil
	}
	s.wakeMu.Unlock()
}

// client reads one stream until it has every event.
func (s *swarm) client(i int, u *url.URL, connected func()) error {
	conn, err := net.Dial("tcp", u.Host)
	if err != nil {
		connected()
		return err
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\nAccept: text/event-stream\r\n\r\n", u.RequestURI(), u.Host)
	r := bufio.NewReaderSize(conn, 4096)
	status, err := r.ReadString('\n')
	if err != nil || len(status) < 12 || status[9:12] != "200" {
		connected()
		return fmt.Errorf("status %q: %v", status, err)
	}
	for { // headers
		line, err := r.ReadSlice('\n')
		if err != nil {
			connected()
			return err
		}
		if len(bytes.TrimSpace(line)) == 0 {
			break
		}
	}
	connected()
	lat := make([]int64, 0, s.events)
	seen := 0
	for seen < s.events {
		line, err := r.ReadSlice('\n')
		if err != nil {
			return err
		}
		if !bytes.HasPrefix(line, []byte("data:")) {
			continue
		}
		now := time.Now().UnixNano()
		a := bytes.IndexByte(line, '@')
		if a < 0 {
			continue
		}
		b := bytes.IndexByte(line[a+1:], '@')
		if b < 0 {
			continue
		}
		idxS, tsS, ok := bytes.Cut(line[a+1:a+1+b], []byte(":"))
		if !ok {
			continue
		}
		idx, err1 := strconv.Atoi(string(idxS))
		ts, err2 := strconv.ParseInt(string(tsS), 10, 64)
		if err1 != nil || err2 != nil || idx < 0 || idx >= s.events {
			continue
		}
		us := (now - ts) / 1000
		lat = append(lat, us)
		for {
			cur := s.last[idx].Load()
			if us <= cur || s.last[idx].CompareAndSwap(cur, us) {
				break
			}
		}
		s.got[idx].Add(1)
		s.delivered()
		seen++
	}
	s.mu.Lock()
	s.lat[i] = lat
	s.mu.Unlock()
	return nil
}

func (s *swarm) report(n int) {
	s.mu.Lock()
	var all []int64
	for _, l := range s.lat {
		all = append(all, l...)
	}
	s.mu.Unlock()
	slices.Sort(all)
	var last []int64
	for i := range s.events {
		if s.got[i].Load() == int32(n) {
			last = append(last, s.last[i].Load())
		}
	}
	slices.Sort(last)
	res := Result{Clients: n, Events: s.events, Deliveries: len(all), Missing: n*s.events - len(all),
		P50: pct(all, 50), P90: pct(all, 90), P99: pct(all, 99), LastP50: pct(last, 50), LastP99: pct(last, 99)}
	if len(all) > 0 {
		res.Max = all[len(all)-1]
	}
	b, _ := json.Marshal(res)
	fmt.Println(string(b))
}

func pct(sorted []int64, p int) int64 {
	if len(sorted) == 0 {
		return 0
	}
	i := (len(sorted)*p + 99) / 100
	return sorted[max(0, min(i-1, len(sorted)-1))]
}
