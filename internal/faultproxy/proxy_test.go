package faultproxy_test

import (
	"bufio"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/vigil-dev/vigil/internal/faultproxy"
)

// Commands, pipelines of every reply shape, big values and pub/sub go
// through unchanged.
func TestForwards(t *testing.T) {
	w := newWorld(t)
	c := ctx(t)
	big := strings.Repeat("x", 1<<20)
	if err := w.via.Set(c, w.key("big"), big, 0).Err(); err != nil {
		t.Fatal(err)
	}
	if got, err := w.via.Get(c, w.key("big")).Result(); err != nil || got != big {
		t.Fatalf("GET big: %d bytes, %v", len(got), err)
	}
	w.via.HSet(c, w.key("h"), "f", "v", "g", "w")
	pipe := w.via.Pipeline()
	var maps []*redis.MapStringStringCmd
	var incrs []*redis.IntCmd
	for range 200 {
		maps = append(maps, pipe.HGetAll(c, w.key("h")))
		incrs = append(incrs, pipe.Incr(c, w.key("n")))
		pipe.Get(c, w.key("missing"))
	}
	if _, err := pipe.Exec(c); err != nil && !errors.Is(err, redis.Nil) {
		t.Fatal(err)
	}
	for i := range maps {
		if m := maps[i].Val(); m["f"] != "v" || m["g"] != "w" {
			t.Fatalf("HGETALL %d: %v", i, m)
		}
		if n := incrs[i].Val(); n != int64(i+1) {
			t.Fatalf("INCR %d: %d", i, n)
		}
	}

	sub := w.via.Subscribe(c, w.key("ch"))
	defer sub.Close()
	if _, err := sub.Receive(c); err != nil { // the subscription's confirmation
		t.Fatal(err)
	}
	if err := w.via.Publish(c, w.key("ch"), "hello").Err(); err != nil {
		t.Fatal(err)
	}
	msg, err := sub.ReceiveMessage(c)
	if err != nil || msg.Payload != "hello" {
		t.Fatalf("message %v, %v", msg, err)
	}
	if s := w.proxy.Stats(); s.Accepted < 2 || s.Cut+s.Refused+s.Dropped != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// Cut ends live connections, one with a blocking command in flight
// included; new ones go through.
func TestCut(t *testing.T) {
	w := newWorld(t)
	conn, r := w.raw(t)
	send(t, conn, "PING")
	expectLine(t, r, "+PONG") // the connection is live in the proxy
	send(t, conn, "BLPOP", w.key("never"), "30")
	if n := w.proxy.Cut(); n < 1 {
		t.Fatalf("Cut closed %d connections", n)
	}
	expectClosed(t, r)
	if err := w.via.Ping(ctx(t)).Err(); err != nil {
		t.Fatalf("a new connection after Cut: %v", err)
	}
	if s := w.proxy.Stats(); s.Cut < 1 {
		t.Fatalf("stats %+v", s)
	}
}

// A client that sees one connection cut sends at once on its others, as
// go-redis retries a command on another pooled connection: nothing sent
// after the Cut began reaches Redis (queue's
// TestToxicCountersOutliveALostArchive: a held archive's retry got through
// a connection the Cut had not closed yet, and ran).
func TestCutLetsNothingThroughAConnectionItHasNotClosedYet(t *testing.T) {
	w := newWorld(t)
	const n = 40
	conns := make([]net.Conn, n)
	readers := make([]*bufio.Reader, n)
	for i := range n {
		conns[i], readers[i] = w.raw(t)
		send(t, conns[i], "PING")
		expectLine(t, readers[i], "+PONG")
	}
	incr := cmd("INCR", w.key("after-the-cut"))
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = readers[i].ReadByte() // the connection ends
			for j, c := range conns {
				if j != i {
					_, _ = c.Write(incr) // a retry on another connection; closed ones fail
				}
			}
		}()
	}
	if got := w.proxy.Cut(); got < n {
		t.Fatalf("Cut closed %d connections, want %d or more", got, n)
	}
	wg.Wait()
	if v := w.env.Client.Get(ctx(t), w.key("after-the-cut")).Val(); v != "" {
		t.Fatalf("%s commands sent after the Cut began reached Redis", v)
	}
}

// Refuse closes new connections at once and leaves live ones alone.
func TestRefuse(t *testing.T) {
	w := newWorld(t)
	live, lr := w.raw(t)
	send(t, live, "PING")
	expectLine(t, lr, "+PONG")

	w.proxy.Refuse(true)
	c, err := net.Dial("tcp", w.proxy.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if n, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatalf("refused connection read %d bytes", n)
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("refused connection was not closed")
	}
	send(t, live, "PING")
	expectLine(t, lr, "+PONG")

	w.proxy.Refuse(false)
	other, or := w.raw(t)
	send(t, other, "PING")
	expectLine(t, or, "+PONG")
	if s := w.proxy.Stats(); s.Refused != 1 {
		t.Fatalf("stats %+v", s)
	}
}

// Stall holds bytes both ways, like a paused server; they flow again when
// it ends.
func TestStall(t *testing.T) {
	w := newWorld(t)
	conn, r := w.raw(t)
	send(t, conn, "PING")
	expectLine(t, r, "+PONG")

	w.proxy.Stall(true)
	send(t, conn, "SET", w.key("k"), "v")
	if n := w.env.Client.Exists(ctx(t), w.key("k")).Val(); n != 0 {
		t.Fatal("a command passed a stalled proxy")
	}
	w.proxy.Stall(false)
	expectLine(t, r, "+OK")
	if got := w.env.Client.Get(ctx(t), w.key("k")).Val(); got != "v" {
		t.Fatalf("k = %q after the stall", got)
	}
	if err := w.via.Ping(ctx(t)).Err(); err != nil {
		t.Fatalf("PING after the stall: %v", err)
	}
}

// A dropped reply: the script ran, its caller saw the connection close,
// and the next call goes through (the drop is armed once).
func TestDropReplyScript(t *testing.T) {
	w := newWorld(t)
	c := ctx(t)
	script := redis.NewScript(`return redis.call("INCR", KEYS[1])`)
	if err := script.Load(c, w.env.Client).Err(); err != nil {
		t.Fatal(err)
	}
	dropped := w.proxy.DropReply(func(args []string) bool {
		return len(args) > 1 && strings.EqualFold(args[0], "EVALSHA") && args[1] == script.Hash()
	})
	if err := w.via.Ping(c).Err(); err != nil { // not matched
		t.Fatal(err)
	}
	if n, err := script.Run(c, w.via, []string{w.key("n")}).Int(); err == nil {
		t.Fatalf("the dropped call returned %d", n)
	}
	select {
	case <-dropped:
	default:
		t.Fatal("the drop's channel is open after the call failed")
	}
	if got := w.env.Client.Get(c, w.key("n")).Val(); got != "1" {
		t.Fatalf("n = %q: the command did not run", got)
	}
	if n, err := script.Run(c, w.via, []string{w.key("n")}).Int(); err != nil || n != 2 {
		t.Fatalf("the next call: %d, %v", n, err)
	}
	if s := w.proxy.Stats(); s.Dropped != 1 {
		t.Fatalf("stats %+v", s)
	}
}

// In a pipeline, replies before the dropped one arrive; commands after it
// never reach the server.
func TestDropReplyPipelined(t *testing.T) {
	w := newWorld(t)
	conn, r := w.raw(t)
	dropped := w.proxy.DropReply(func(args []string) bool {
		return strings.EqualFold(args[0], "INCR") && args[1] == w.key("b")
	})
	var b []byte
	b = append(b, cmd("SET", w.key("a"), "1")...)
	b = append(b, cmd("INCR", w.key("b"))...)
	b = append(b, cmd("INCR", w.key("c"))...)
	if _, err := conn.Write(b); err != nil {
		t.Fatal(err)
	}
	expectLine(t, r, "+OK")
	expectClosed(t, r)
	<-dropped
	c := ctx(t)
	if a, b := w.env.Client.Get(c, w.key("a")).Val(), w.env.Client.Get(c, w.key("b")).Val(); a != "1" || b != "1" {
		t.Fatalf("a=%q b=%q: the commands before and at the drop did not run", a, b)
	}
	if n := w.env.Client.Exists(c, w.key("c")).Val(); n != 0 {
		t.Fatal("a command after the dropped one reached the server")
	}
}

// The pairing survives RESP3 replies (maps, pushes): the reply dropped is
// the one matched, those before it arrive whole.
func TestDropReplyRESP3(t *testing.T) {
	w := newWorld(t)
	c := ctx(t)
	o := *w.opt
	o.Protocol = 3
	r3 := redis.NewClient(&o)
	defer r3.Close()
	w.env.Client.HSet(c, w.key("h"), "f", "v")
	w.proxy.DropReply(func(args []string) bool { return strings.EqualFold(args[0], "INCR") })
	pipe := r3.Pipeline()
	m := pipe.HGetAll(c, w.key("h"))
	pipe.Incr(c, w.key("n"))
	if _, err := pipe.Exec(c); err == nil {
		t.Fatal("the pipeline with a dropped reply succeeded")
	}
	if m.Val()["f"] != "v" {
		t.Fatalf("HGETALL before the drop: %v (%v)", m.Val(), m.Err())
	}
	if got := w.env.Client.Get(c, w.key("n")).Val(); got != "1" {
		t.Fatalf("n = %q", got)
	}
	if v, err := r3.HGetAll(c, w.key("h")).Result(); err != nil || v["f"] != "v" {
		t.Fatalf("after the drop: %v, %v", v, err)
	}
}

// An upstream that does not answer ends the client's connection.
func TestUpstreamDown(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	p, err := faultproxy.New(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1})
	defer c.Close()
	if err := c.Ping(ctx(t)).Err(); err == nil {
		t.Fatal("PING through a proxy to nothing succeeded")
	}
	if s := p.Stats(); s.Failed < 1 {
		t.Fatalf("stats %+v", s)
	}
}

// Close ends live, stalled connections and is safe twice.
func TestClose(t *testing.T) {
	w := newWorld(t)
	conn, r := w.raw(t)
	send(t, conn, "PING")
	expectLine(t, r, "+PONG")
	w.proxy.Stall(true)
	send(t, conn, "PING")
	if err := w.proxy.Close(); err != nil {
		t.Fatal(err)
	}
	expectClosed(t, r)
	if err := w.proxy.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := net.Dial("tcp", w.proxy.Addr()); err == nil {
		t.Fatal("a closed proxy accepted a connection")
	}
	if n := w.proxy.Conns(); n != 0 {
		t.Fatalf("%d connections after Close", n)
	}
}

// HoldReply: the command runs, its reply waits until released; a Cut
// ends the wait with an error instead.
func TestHoldReply(t *testing.T) {
	w := newWorld(t)
	c := ctx(t)
	matchB := func(args []string) bool { return strings.EqualFold(args[0], "INCR") && args[1] == w.key("b") }
	held, release := w.proxy.HoldReply(matchB)
	defer release()
	got := make(chan error, 1)
	go func() { got <- w.via.Incr(c, w.key("b")).Err() }()
	select {
	case <-held:
	case <-c.Done():
		t.Fatal("the reply was never held")
	}
	if got := w.env.Client.Get(c, w.key("b")).Val(); got != "1" {
		t.Fatalf("b = %q: the held command did not run", got)
	}
	select {
	case err := <-got:
		t.Fatalf("the call returned (%v) while its reply was held", err)
	default:
	}
	release()
	if err := <-got; err != nil {
		t.Fatalf("the released call: %v", err)
	}

	held, _ = w.proxy.HoldReply(matchB)
	go func() { got <- w.via.Incr(c, w.key("b")).Err() }()
	<-held
	w.proxy.Cut()
	if err := <-got; err == nil {
		t.Fatal("a held call whose connection was cut succeeded")
	}
	if s := w.proxy.Stats(); s.Held != 2 || s.Dropped != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// HoldCommand: the matched command waits in the proxy, other connections
// go on; released, it runs; cut while held, it never runs.
func TestHoldCommand(t *testing.T) {
	w := newWorld(t)
	c := ctx(t)
	matchB := func(args []string) bool { return strings.EqualFold(args[0], "INCR") && args[1] == w.key("b") }
	held, release := w.proxy.HoldCommand(matchB)
	defer release()
	got := make(chan error, 1)
	go func() { got <- w.via.Incr(c, w.key("b")).Err() }()
	select {
	case <-held:
	case <-c.Done():
		t.Fatal("the command was never held")
	}
	if err := w.client(t).Incr(c, w.key("a")).Err(); err != nil {
		t.Fatalf("another connection while a command is held: %v", err)
	}
	if n := w.env.Client.Exists(c, w.key("b")).Val(); n != 0 {
		t.Fatal("the held command ran")
	}
	release()
	if err := <-got; err != nil {
		t.Fatalf("the released command: %v", err)
	}
	if v := w.env.Client.Get(c, w.key("b")).Val(); v != "1" {
		t.Fatalf("b = %q after the release, want 1", v)
	}

	held, _ = w.proxy.HoldCommand(matchB)
	go func() { got <- w.via.Incr(c, w.key("b")).Err() }()
	<-held
	w.proxy.Cut()
	if err := <-got; err == nil {
		t.Fatal("a held command whose connection was cut succeeded")
	}
	if v := w.env.Client.Get(c, w.key("b")).Val(); v != "1" {
		t.Fatalf("b = %q: the command cut while held ran", v)
	}
	if s := w.proxy.Stats(); s.HeldCmds != 2 || s.Held != 0 {
		t.Fatalf("stats %+v", s)
	}
}
