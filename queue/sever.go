package queue

import (
	"context"
	"errors"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// errSevered is the dial error of a worker whose connections were severed.
var errSevered = errors.New("redis connections severed: the worker is stopping past its bound")

// connSet tracks the connections a worker's Redis client dialed, so that
// a stopping worker can cut them all at once (RunWorker's shutdown bound):
// every call waiting on Redis then fails at once, as if Redis had gone
// (faultNoAnswer: outcomes are kept, not lost), and nothing dials again.
// Closing the client would do the same but also closes, under asynq's
// feet, the channel of its cancellation subscription, which asynq v0.26.0
// reads without checking: a nil message, a panic.
type connSet struct {
	mu      sync.Mutex
	conns   map[net.Conn]struct{}
	severed bool
}

// dial dials through next and tracks the connection.
func (s *connSet) dial(ctx context.Context, network, addr string, next redis.DialHook) (net.Conn, error) {
	s.mu.Lock()
	severed := s.severed
	s.mu.Unlock()
	if severed {
		// A connection that fails at its first byte, not a dial error:
		// go-redis's pool dials again five times with a backoff (a second
		// or more) after a dial error, and its commands retry one.
		return deadConn{}, nil
	}
	c, err := next(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.severed {
		_ = c.Close()
		return deadConn{}, nil
	}
	if s.conns == nil {
		s.conns = map[net.Conn]struct{}{}
	}
	s.conns[c] = struct{}{}
	t := trackedConn{Conn: c, set: s}
	if sc, ok := c.(syscall.Conn); ok {
		return trackedSysConn{t, sc}, nil // go-redis checks idle connections through it
	}
	return t, nil
}

// track makes s track every connection rdb dials. A plain or Sentinel
// client dials through its own hooks; a cluster client never does (go-redis
// calls no DialHook of a ClusterClient's hooks): its connections are its node
// clients', each with hooks of its own, so s is added to every node client as
// the cluster client creates it: a node's connections left untracked are
// not severed, and a worker of a Cluster would keep waiting on a shard past
// its shutdown bound, outliving its dead supervisor
// (TestSeverCutsAClusterNodesConnections). Call it before rdb's first
// command: a node client created before is not tracked.
func (s *connSet) track(rdb redis.UniversalClient) {
	cc, ok := rdb.(*redis.ClusterClient)
	if !ok {
		return // the caller's hook (redisHook.DialHook) dials through s
	}
	cc.OnNewNode(func(node *redis.Client) { node.AddHook(dialTracker{s}) })
}

// dialTracker is the hook of a cluster's node client: it only dials
// through its set (the cluster client's own hooks do the rest).
type dialTracker struct{ s *connSet }

func (d dialTracker) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		return d.s.dial(ctx, network, addr, next)
	}
}

func (dialTracker) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (dialTracker) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// refusal is the error of every command once the connections are
// severed (nil before).
func (s *connSet) refusal() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.severed {
		return nil
	}
	return &net.OpError{Op: "dial", Err: errSevered}
}

// sever closes every tracked connection and refuses new ones.
func (s *connSet) sever() {
	s.mu.Lock()
	s.severed = true
	conns := s.conns
	s.conns = nil
	s.mu.Unlock()
	for c := range conns {
		_ = c.Close()
	}
}

func (s *connSet) forget(c net.Conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
}

// trackedConn leaves the set when it is closed.
type trackedConn struct {
	net.Conn
	set *connSet
}

func (t trackedConn) Close() error {
	t.set.forget(t.Conn)
	return t.Conn.Close()
}

type trackedSysConn struct {
	trackedConn
	sc syscall.Conn
}

func (t trackedSysConn) SyscallConn() (syscall.RawConn, error) { return t.sc.SyscallConn() }

// deadConn is a severed worker's connection: every read and write fails at
// once, with an error go-redis does not retry.
type deadConn struct{}

func severedErr(op string) error { return &net.OpError{Op: op, Net: "tcp", Err: errSevered} }

func (deadConn) Read([]byte) (int, error)         { return 0, severedErr("read") }
func (deadConn) Write([]byte) (int, error)        { return 0, severedErr("write") }
func (deadConn) Close() error                     { return nil }
func (deadConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (deadConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (deadConn) SetDeadline(time.Time) error      { return nil }
func (deadConn) SetReadDeadline(time.Time) error  { return nil }
func (deadConn) SetWriteDeadline(time.Time) error { return nil }
