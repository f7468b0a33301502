package faultproxy

import (
	"bufio"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2/server"
)

// kind says what the proxy does with the reply to one command.
type kind int

const (
	pass kind = iota // forward the reply
	drop             // swallow the reply, then close the connection
	hold             // hold the reply until released (HoldReply)
	raw              // forward it, then stop pairing: pass every byte through
)

// pending is a command forwarded whose reply has not come back yet.
type pending struct {
	kind kind
	arm  *dropArm // for drop and hold
}

// conn is one client connection and its upstream connection. Two
// forwarders run: commands (client → server) and replies (server →
// client); the first to end closes both sides, which ends the other.
type conn struct {
	p      *Proxy
	client net.Conn
	done   chan struct{} // closed by end: nothing more is forwarded
	ended  sync.Once
	once   sync.Once

	mu     sync.Mutex
	server net.Conn // nil until dialed
	queue  []pending
}

func newConn(p *Proxy, client net.Conn) *conn {
	return &conn{p: p, client: client, done: make(chan struct{})}
}

func (c *conn) run() {
	up, err := net.DialTimeout("tcp", c.p.upstream, DialTimeout)
	if err != nil {
		c.p.dialFailed()
		c.close()
		return
	}
	c.mu.Lock()
	c.server = up
	c.mu.Unlock()
	select {
	case <-c.done: // cut while dialing
		_ = up.Close()
		return
	default:
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		c.replies(up)
	}()
	c.commands(up)
	wg.Wait()
}

// end stops the connection's forwarding without a system call: a Cut ends
// every connection before it closes any, so that a client that sees one
// connection closed cannot get a command through another one the Cut has
// not closed yet (go-redis retries a command on another connection at
// once: the archive held in queue's TestToxicCountersOutliveALostArchive
// reached Redis that way under load).
func (c *conn) end() { c.ended.Do(func() { close(c.done) }) }

// close ends the connection and closes both sides once.
func (c *conn) close() {
	c.end()
	c.once.Do(func() {
		_ = c.client.Close()
		c.mu.Lock()
		if c.server != nil {
			_ = c.server.Close()
		}
		c.mu.Unlock()
	})
}

// forward writes b to dst once no stall holds it; false when the
// connection ended meanwhile or the write failed (then it is closed).
func (c *conn) forward(dst net.Conn, b []byte) bool {
	for {
		resume := c.p.stalled()
		if resume == nil {
			break
		}
		select {
		case <-resume:
		case <-c.done:
			return false
		}
	}
	select {
	case <-c.done: // ended (Cut) while this was read or waited
		return false
	default:
	}
	if _, err := dst.Write(b); err != nil {
		c.close()
		return false
	}
	return true
}

// copyRaw passes every byte of src (what its reader holds first) to dst
// until either side ends.
func (c *conn) copyRaw(src *bufio.Reader, dst net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !c.forward(dst, buf[:n]) {
			return
		}
		if err != nil {
			c.close()
			return
		}
	}
}

func (c *conn) push(e pending) {
	c.mu.Lock()
	c.queue = append(c.queue, e)
	c.mu.Unlock()
}

func (c *conn) pop() (pending, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.queue) == 0 {
		return pending{}, false
	}
	e := c.queue[0]
	c.queue = c.queue[1:]
	return e, true
}

func (c *conn) headIsRaw() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.queue) > 0 && c.queue[0].kind == raw
}

// commands forwards the client's commands, one RESP array at a time (read
// with miniredis's parser: clients send arrays of bulk strings), noting
// for each what to do with its reply.
func (c *conn) commands(up net.Conn) {
	r := bufio.NewReader(c.client)
	for {
		first, err := r.Peek(1)
		if err != nil {
			c.close()
			return
		}
		if first[0] != '*' { // an inline command: no pairing from here on
			c.push(pending{kind: raw})
			c.copyRaw(r, up)
			return
		}
		v, err := server.ParseReply(r)
		if err != nil {
			c.close()
			return
		}
		args, ok := strs(v)
		if !ok {
			c.close()
			return
		}
		if arm := c.p.takeHold(args); arm != nil {
			close(arm.done)
			select {
			case <-arm.release:
			case <-c.done:
				return // never forwarded
			}
		}
		e := pending{kind: pass}
		if arm := c.p.takeDrop(args); arm != nil {
			e = pending{kind: drop, arm: arm}
			if arm.release != nil {
				e.kind = hold
			}
		} else if unpaired(args) {
			e.kind = raw
		}
		c.push(e)
		// The last command of what the client wrote waits out the
		// delay: one per round trip, a pipeline's included.
		if d := c.p.roundTripDelay(); d > 0 && r.Buffered() == 0 {
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-c.done:
				t.Stop()
				return
			}
		}
		if !c.forward(up, encode(args)) {
			return
		}
		switch e.kind {
		case drop:
			// Nothing more from this client reaches the server: the
			// connection ends when the reply comes.
			<-c.done
			return
		case raw:
			c.copyRaw(r, up)
			return
		}
	}
}

// replies forwards the server's replies, pairing each with the oldest
// command still waiting for one; push frames (RESP3) pair with nothing.
func (c *conn) replies(up net.Conn) {
	r := bufio.NewReader(up)
	var buf []byte
	for {
		if c.headIsRaw() {
			c.copyRaw(r, c.client)
			return
		}
		var typ byte
		var err error
		buf, typ, err = readFrame(r, buf[:0])
		if err != nil {
			c.close()
			return
		}
		if typ == '>' {
			if !c.forward(c.client, buf) {
				return
			}
			continue
		}
		e, ok := c.pop()
		if ok && e.kind == drop {
			close(e.arm.done) // before the client can see the connection end
			c.close()
			return
		}
		if ok && e.kind == hold {
			// The command ran; its reply (and every one after it on this
			// connection) waits, as behind a server that stopped answering.
			close(e.arm.done)
			select {
			case <-e.arm.release:
			case <-c.done:
				return
			}
		}
		if !c.forward(c.client, buf) {
			return
		}
		if !ok || e.kind == raw {
			// A reply to no command seen, or a connection leaving
			// request/reply: pass the rest through.
			c.copyRaw(r, c.client)
			return
		}
	}
}

// unpaired reports whether a command takes its connection out of
// one-reply-per-command.
func unpaired(args []string) bool {
	if len(args) == 0 {
		return false
	}
	switch strings.ToUpper(args[0]) {
	case "SUBSCRIBE", "PSUBSCRIBE", "SSUBSCRIBE", "MONITOR", "SYNC", "PSYNC":
		return true
	case "CLIENT":
		return len(args) > 1 && strings.EqualFold(args[1], "REPLY")
	}
	return false
}

// strs turns a parsed command (an array of bulk strings) into its args.
func strs(v any) ([]string, bool) {
	arr, ok := v.([]any)
	if !ok {
		return nil, v == nil // "*-1" / "*0": an empty command
	}
	out := make([]string, len(arr))
	for i, a := range arr {
		switch s := a.(type) {
		case string:
			out[i] = s
		case nil:
		default:
			return nil, false
		}
	}
	return out, true
}

// encode writes args back as the RESP array of bulk strings they came in.
func encode(args []string) []byte {
	n := 16
	for _, a := range args {
		n += len(a) + 16
	}
	b := make([]byte, 0, n)
	b = append(b, '*')
	b = appendInt(b, len(args))
	for _, a := range args {
		b = append(b, '$')
		b = appendInt(b, len(a))
		b = append(b, a...)
		b = append(b, '\r', '\n')
	}
	return b
}

func appendInt(b []byte, n int) []byte {
	var d [20]byte
	i := len(d)
	if n == 0 {
		i--
		d[i] = '0'
	}
	for n > 0 {
		i--
		d[i] = byte('0' + n%10)
		n /= 10
	}
	b = append(b, d[i:]...)
	return append(b, '\r', '\n')
}
