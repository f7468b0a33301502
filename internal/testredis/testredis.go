// Package testredis gives tests a Redis: a fresh miniredis by default (keys
// expire on the real clock), or the real server named by
// VIGIL_TEST_REDIS_URL (the integration suite, `make test-redis`), isolated
// by a key prefix unique to the test. It can also start a redis-server
// process of its own, for tests that stop and restart the server.
package testredis

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/vigil-dev/vigil/internal/faultproxy"
)

// EnvURL names the real Redis of the integration suite.
const EnvURL = "VIGIL_TEST_REDIS_URL"

// Env is one test's Redis.
type Env struct {
	Client *redis.Client
	URL    string
	Prefix string               // unique key prefix for this test, e.g. "vt3f2a:"
	Mini   *miniredis.Miniredis // nil on a real server
}

// Real reports whether the integration suite's real Redis is configured.
func Real() bool { return os.Getenv(EnvURL) != "" }

// New returns the test's Redis; it is cleaned up when the test ends.
func New(tb testing.TB) *Env {
	tb.Helper()
	e := &Env{Prefix: "vt" + randHex(4) + ":"}
	if url := os.Getenv(EnvURL); url != "" {
		e.URL = url
	} else {
		m := miniredis.NewMiniRedis()
		m.ClockTTL(true)
		if err := m.StartAddr("127.0.0.1:0"); err != nil {
			tb.Fatalf("start miniredis: %v", err)
		}
		tb.Cleanup(m.Close)
		e.Mini, e.URL = m, "redis://"+m.Addr()
	}
	e.Client = client(tb, e.URL)
	if e.Mini == nil {
		tb.Cleanup(func() { e.flushPrefix(tb) })
	}
	return e
}

// NewReal is New on a real server, skipping the test without one.
func NewReal(tb testing.TB) *Env {
	tb.Helper()
	if !Real() {
		tb.Skipf("needs a real Redis: set %s (make test-redis)", EnvURL)
	}
	return New(tb)
}

func client(tb testing.TB, url string) *redis.Client {
	tb.Helper()
	opt, err := redis.ParseURL(url)
	if err != nil {
		tb.Fatalf("parse %s: %v", url, err)
	}
	opt.ContextTimeoutEnabled = true // as redisconn's clients: a call's deadline bounds it on the socket too
	c := redis.NewClient(opt)
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// ProxyTo starts a fault proxy in front of the Redis at redisURL, closed
// when the test ends.
func ProxyTo(tb testing.TB, redisURL string) *faultproxy.Proxy {
	tb.Helper()
	u, err := url.Parse(redisURL)
	if err != nil {
		tb.Fatal(err)
	}
	p, err := faultproxy.New(u.Host)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = p.Close() })
	return p
}

// Proxied starts a fault proxy in front of e's Redis (closed when the test
// ends) and returns it with a client that reaches Redis through it, with
// go-redis's default retries (closed too).
func (e *Env) Proxied(tb testing.TB) (*faultproxy.Proxy, *redis.Client) {
	tb.Helper()
	p := ProxyTo(tb, e.URL)
	opt, err := redis.ParseURL(e.URL)
	if err != nil {
		tb.Fatal(err)
	}
	opt.Addr = p.Addr()
	c := redis.NewClient(opt)
	tb.Cleanup(func() { _ = c.Close() })
	return p, c
}

func (e *Env) flushPrefix(tb testing.TB) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	iter := e.Client.Scan(ctx, 0, e.Prefix+"*", 1000).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	for len(keys) > 0 {
		n := min(len(keys), 500)
		_ = e.Client.Del(ctx, keys[:n]...).Err()
		keys = keys[n:]
	}
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort(tb testing.TB) int {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// Server is a redis-server process of the test's own, on a loopback port,
// that the test may stop and start again.
type Server struct {
	tb   testing.TB
	Port int
	URL  string
	dir  string
	cmd  *exec.Cmd
}

// StartServer starts redis-server (skipping the test when the binary is
// missing: the integration suite installs it). It keeps nothing on disk
// unless started with persist (then Stop and Start keep the data).
func StartServer(tb testing.TB) *Server {
	tb.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		tb.Skip("redis-server not installed (make test-redis installs it)")
	}
	s := &Server{tb: tb, Port: FreePort(tb), dir: tb.TempDir()}
	s.URL = "redis://127.0.0.1:" + strconv.Itoa(s.Port)
	s.Start()
	tb.Cleanup(s.Stop)
	return s
}

// Start starts the server (again). With saved data in its folder (see Save)
// it comes back with that data.
func (s *Server) Start() {
	s.tb.Helper()
	if s.cmd != nil {
		return
	}
	cmd := exec.Command("redis-server", "--port", strconv.Itoa(s.Port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", s.dir, "--dbfilename", "dump.rdb")
	cmd.Stdout, cmd.Stderr = nil, nil
	if err := cmd.Start(); err != nil {
		s.tb.Fatalf("start redis-server: %v", err)
	}
	s.cmd = cmd
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + strconv.Itoa(s.Port)})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			s.tb.Fatalf("redis-server on %d did not answer: %v", s.Port, err)
		}
		time.Sleep(20 * time.Millisecond) // polling an external process, not a goroutine
	}
}

// Save writes the data set to disk so that the next Start keeps it.
func (s *Server) Save() {
	s.tb.Helper()
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + strconv.Itoa(s.Port)})
	defer c.Close()
	if err := c.Save(context.Background()).Err(); err != nil {
		s.tb.Fatalf("SAVE: %v", err)
	}
}

// Stop kills the server (data not saved is lost).
func (s *Server) Stop() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	s.cmd = nil
}

// Wipe removes the saved data so that the next Start comes back empty.
func (s *Server) Wipe() { _ = os.Remove(filepath.Join(s.dir, "dump.rdb")) }

// String names the server.
func (s *Server) String() string { return fmt.Sprintf("redis-server :%d", s.Port) }

// ServerCPU is the CPU the Redis server behind rdb has used since it
// started, user and system (INFO cpu), in seconds: what benchmarks divide
// by to report work per second of Redis's own CPU.
func ServerCPU(tb testing.TB, rdb redis.UniversalClient) float64 {
	tb.Helper()
	info, err := rdb.Info(context.Background(), "cpu").Result()
	if err != nil {
		tb.Fatal(err)
	}
	var t float64
	for _, l := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(l), ":")
		if ok && (k == "used_cpu_user" || k == "used_cpu_sys") {
			f, _ := strconv.ParseFloat(v, 64)
			t += f
		}
	}
	return t
}
