package faultproxy_test

import (
	"bufio"
	"context"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/vigil-dev/vigil/internal/faultproxy"
	"github.com/vigil-dev/vigil/internal/testredis"
)

// world is a Redis (miniredis, or the real one of VIGIL_TEST_REDIS_URL), a
// proxy in front of it, and a client that goes through the proxy.
type world struct {
	env   *testredis.Env
	proxy *faultproxy.Proxy
	via   *redis.Client // through the proxy, no retries
	opt   *redis.Options
}

func newWorld(tb testing.TB) *world {
	tb.Helper()
	env := testredis.New(tb)
	opt, err := redis.ParseURL(env.URL)
	if err != nil {
		tb.Fatal(err)
	}
	p, err := faultproxy.New(opt.Addr)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = p.Close() })
	opt.Addr = p.Addr()
	opt.MaxRetries = -1
	w := &world{env: env, proxy: p, opt: opt}
	w.via = w.client(tb)
	return w
}

// client is a new go-redis client through the proxy.
func (w *world) client(tb testing.TB) *redis.Client {
	tb.Helper()
	o := *w.opt
	c := redis.NewClient(&o)
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

func (w *world) key(name string) string { return w.env.Prefix + name }

// raw is a plain TCP connection through the proxy, in the database of the
// world's Redis.
func (w *world) raw(tb testing.TB) (net.Conn, *bufio.Reader) {
	tb.Helper()
	c, err := net.Dial("tcp", w.proxy.Addr())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	r := bufio.NewReader(c)
	if w.opt.DB != 0 {
		send(tb, c, "SELECT", itoa(w.opt.DB))
		expectLine(tb, r, "+OK")
	}
	return c, r
}

func itoa(n int) string { return string(appendInt(nil, n)) }

func appendInt(b []byte, n int) []byte {
	if n >= 10 {
		b = appendInt(b, n/10)
	}
	return append(b, byte('0'+n%10))
}

// send writes one command as a RESP array.
func send(tb testing.TB, c net.Conn, args ...string) {
	tb.Helper()
	if _, err := c.Write(cmd(args...)); err != nil {
		tb.Fatalf("write %v: %v", args, err)
	}
}

func cmd(args ...string) []byte {
	b := []byte("*" + itoa(len(args)) + "\r\n")
	for _, a := range args {
		b = append(b, "$"+itoa(len(a))+"\r\n"+a+"\r\n"...)
	}
	return b
}

func expectLine(tb testing.TB, r *bufio.Reader, want string) {
	tb.Helper()
	line, err := r.ReadString('\n')
	if err != nil {
		tb.Fatalf("read reply (want %q): %v", want, err)
	}
	if got := line[:len(line)-2]; got != want {
		tb.Fatalf("reply %q, want %q", got, want)
	}
}

// expectClosed waits for the connection to end with nothing more to read.
func expectClosed(tb testing.TB, r *bufio.Reader) {
	tb.Helper()
	if b, err := r.ReadByte(); err == nil {
		rest, _ := r.Peek(r.Buffered())
		tb.Fatalf("connection still open: read %q%q", b, rest)
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		tb.Fatalf("connection not closed within its deadline")
	}
}

func ctx(tb testing.TB) context.Context {
	tb.Helper()
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	tb.Cleanup(cancel)
	return c
}
