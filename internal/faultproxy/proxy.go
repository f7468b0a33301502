package faultproxy

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"
)

// DialTimeout bounds the proxy's connect to its upstream.
const DialTimeout = 5 * time.Second

// Proxy forwards loopback TCP connections to one upstream Redis address,
// faults aside. Its methods are safe for concurrent use.
type Proxy struct {
	upstream string
	ln       net.Listener
	wg       sync.WaitGroup

	mu      sync.Mutex
	closed  bool
	refuse  bool
	resume  chan struct{} // nil when not stalled; closed when the stall ends
	delay   time.Duration // added to every round trip (Delay)
	drop    *dropArm
	hold    *dropArm // HoldCommand's
	conns   map[*conn]struct{}
	counted Stats
}

// Stats counts what the proxy did since New.
type Stats struct {
	Accepted int // connections accepted and forwarded
	Refused  int // connections closed at once by Refuse
	Failed   int // connections closed because the upstream did not answer the dial
	Cut      int // connections closed by Cut
	Dropped  int // replies swallowed by DropReply
	Held     int // replies held by HoldReply
	HeldCmds int // commands held by HoldCommand
}

// dropArm is one armed DropReply or HoldReply.
type dropArm struct {
	match   func(args []string) bool
	done    chan struct{}
	release chan struct{} // HoldReply's: closed by its release
}

// New listens on a free loopback port and forwards every connection to
// upstream (host:port).
func New(upstream string) (*Proxy, error) {
	if upstream == "" {
		return nil, errors.New("faultproxy: empty upstream address")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultproxy: listen: %w", err)
	}
	p := &Proxy{upstream: upstream, ln: ln, conns: map[*conn]struct{}{}}
	p.wg.Add(1)
	go p.serve()
	return p, nil
}

// Addr is the proxy's listening address (host:port), to use instead of the
// upstream's.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Upstream is the address the proxy forwards to.
func (p *Proxy) Upstream() string { return p.upstream }

// Close stops listening, closes every connection and waits for the
// proxy's goroutines. It is safe to call twice.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		p.wg.Wait()
		return nil
	}
	p.closed = true
	live := p.liveLocked()
	p.mu.Unlock()
	err := p.ln.Close()
	closeAll(live)
	p.wg.Wait()
	return err
}

// Cut closes every live connection, both sides, and returns how many. New
// connections are forwarded as before (see Refuse).
func (p *Proxy) Cut() int {
	p.mu.Lock()
	live := p.liveLocked()
	p.counted.Cut += len(live)
	p.mu.Unlock()
	closeAll(live)
	return len(live)
}

// Refuse, while on, closes each new connection as soon as it is accepted;
// live connections go on (Cut them too for a partition).
func (p *Proxy) Refuse(on bool) {
	p.mu.Lock()
	p.refuse = on
	p.mu.Unlock()
}

// Stall, while on, forwards no byte in either direction, on live and new
// connections alike, as a paused server would: what was read is held and
// delivered when the stall ends, unless the connection closes first.
func (p *Proxy) Stall(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case on && p.resume == nil:
		p.resume = make(chan struct{})
	case !on && p.resume != nil:
		close(p.resume)
		p.resume = nil
	}
}

// Delay adds d to every round trip from now on (0: none), as a slow
// network would: a client's write (one command, or a pipeline) waits d
// before it is forwarded.
func (p *Proxy) Delay(d time.Duration) {
	p.mu.Lock()
	p.delay = d
	p.mu.Unlock()
}

func (p *Proxy) roundTripDelay() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.delay
}

// DropReply arms a lost reply: the next client command (on any connection)
// for which match returns true is forwarded and runs, but its reply is
// swallowed and the client's connection closed when it arrives; the
// client's later bytes on that connection are never forwarded. The
// returned channel is closed once the reply has been swallowed. Arming
// again replaces an armed match that has not fired (its channel then never
// closes); a nil match disarms and returns nil.
func (p *Proxy) DropReply(match func(args []string) bool) <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if match == nil {
		p.drop = nil
		return nil
	}
	p.drop = &dropArm{match: match, done: make(chan struct{})}
	return p.drop.done
}

// DropScriptReply is DropReply for the next script call (EVALSHA) whose
// first key is key: it runs, and its reply is lost.
func (p *Proxy) DropScriptReply(key string) <-chan struct{} {
	return p.DropReply(func(args []string) bool {
		return len(args) > 3 && strings.EqualFold(args[0], "evalsha") && args[3] == key
	})
}

// HoldReply arms a reply that does not come: the next client command (on
// any connection) for which match returns true is forwarded and runs, but
// its reply, and every later one on that connection, is held until release
// is called or the connection closes (Cut, or the client giving up), as a
// server that stopped answering in the middle of a call. held is closed
// once the reply has arrived and is being held. It shares DropReply's arm:
// arming one replaces the other.
func (p *Proxy) HoldReply(match func(args []string) bool) (held <-chan struct{}, release func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	a, release := heldArm(match)
	p.drop = a
	return a.done, release
}

// heldArm is an arm that waits for its release (HoldReply, HoldCommand).
func heldArm(match func(args []string) bool) (*dropArm, func()) {
	a := &dropArm{match: match, done: make(chan struct{}), release: make(chan struct{})}
	var once sync.Once
	return a, func() { once.Do(func() { close(a.release) }) }
}

// HoldCommand arms a command that does not arrive: the next client command
// (on any connection) for which match returns true is held in the proxy,
// not forwarded, with every later byte of that connection, until release
// is called; if the proxy closes the connection first (Cut, Close) it
// never reaches the server, as a command lost with a host cut from Redis
// just as it sent it. (A client that closes its side meanwhile is not
// noticed: the command is forwarded at the release.) Other connections go
// on. held is closed once the command is held. Arming again replaces an
// armed match that has not fired.
func (p *Proxy) HoldCommand(match func(args []string) bool) (held <-chan struct{}, release func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	a, release := heldArm(match)
	p.hold = a
	return a.done, release
}

// takeHold disarms and returns the armed HoldCommand when args match it.
func (p *Proxy) takeHold(args []string) *dropArm {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.hold == nil || !p.hold.match(args) {
		return nil
	}
	a := p.hold
	p.hold = nil
	p.counted.HeldCmds++
	return a
}

// Stats returns the proxy's counts so far.
func (p *Proxy) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.counted
}

// Conns is how many connections are live now.
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// closeAll ends every connection of live, then closes them: see conn.end.
func closeAll(live []*conn) {
	for _, c := range live {
		c.end()
	}
	for _, c := range live {
		c.close()
	}
}

func (p *Proxy) liveLocked() []*conn {
	out := make([]*conn, 0, len(p.conns))
	for c := range p.conns {
		out = append(out, c)
	}
	return out
}

// stalled returns the channel a forwarder waits on before writing, nil
// when not stalled.
func (p *Proxy) stalled() chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.resume
}

// takeDrop disarms and returns the armed drop when args match it.
func (p *Proxy) takeDrop(args []string) *dropArm {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.drop == nil || !p.drop.match(args) {
		return nil
	}
	d := p.drop
	p.drop = nil
	if d.release != nil {
		p.counted.Held++
	} else {
		p.counted.Dropped++
	}
	return d
}

func (p *Proxy) serve() {
	defer p.wg.Done()
	for {
		nc, err := p.ln.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return // closed
		}
		p.mu.Lock()
		if p.closed || p.refuse {
			if p.refuse {
				p.counted.Refused++
			}
			p.mu.Unlock()
			_ = nc.Close()
			continue
		}
		c := newConn(p, nc)
		p.conns[c] = struct{}{}
		p.counted.Accepted++
		p.wg.Add(1)
		p.mu.Unlock()
		go func() {
			defer p.wg.Done()
			c.run()
			p.mu.Lock()
			delete(p.conns, c)
			p.mu.Unlock()
		}()
	}
}

func (p *Proxy) dialFailed() {
	p.mu.Lock()
	p.counted.Failed++
	p.mu.Unlock()
}
