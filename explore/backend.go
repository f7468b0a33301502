package explore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// backend is the Redis under test, as the faults need it.
type backend interface {
	Addr() string
	// Pause makes the server answer nothing (true) or resume (false). It
	// returns false when the backend cannot pause itself (then the world
	// stalls every proxy instead).
	Pause(on bool) (bool, error)
	// Restart stops the server and starts it again on the same address,
	// with its data (keep) or empty. It returns false when the backend
	// cannot restart (then the world cuts and refuses every connection a
	// moment, flushing for an empty restart).
	Restart(keep bool) (bool, error)
	// Flush loses every key without closing any connection.
	Flush() error
	Close()
}

// mini is an in-process miniredis whose keys expire on the real clock.
type mini struct{ m *miniredis.Miniredis }

func newMini() (*mini, error) {
	m := miniredis.NewMiniRedis()
	m.ClockTTL(true)
	if err := m.StartAddr("127.0.0.1:0"); err != nil {
		return nil, fmt.Errorf("start miniredis: %w", err)
	}
	return &mini{m: m}, nil
}

func (b *mini) Addr() string             { return b.m.Addr() }
func (b *mini) Pause(bool) (bool, error) { return false, nil }
func (b *mini) Flush() error             { b.m.FlushAll(); return nil }
func (b *mini) Close()                   { b.m.Close() }

// Restart is not done in place: miniredis v2.40's blocking commands
// (BLPOP) never wake again after Close and Restart.
func (b *mini) Restart(bool) (bool, error) { return false, nil }

// server is a redis-server process of the explorer's own, stopped by pid.
type server struct {
	port int
	dir  string
	// mu guards cmd: a pause's end (a timer of its own) may come while a
	// restart has no process, and would find cmd nil (a panic).
	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	rdb  *redis.Client // for SHUTDOWN and FLUSHALL
	pp   *ports
}

func newServer(pp *ports) (*server, error) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		return nil, errors.New("redis-server not installed (Debian: apt-get install redis-server)")
	}
	dir, err := os.MkdirTemp("", "vigil-explore-redis")
	if err != nil {
		return nil, err
	}
	var lastErr error
	for range 5 { // another process may take the free port first
		ps, err := pp.take(1)
		if err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		s := &server{port: ps[0], dir: dir, pp: pp}
		s.rdb = redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, DialTimeout: time.Second})
		if lastErr = s.start(); lastErr == nil {
			return s, nil
		}
		_ = s.rdb.Close()
		pp.give(ps)
	}
	os.RemoveAll(dir)
	return nil, lastErr
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (s *server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

func (s *server) start() error {
	cmd := exec.Command("redis-server", "--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", s.dir, "--dbfilename", "dump.rdb")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	s.cmd, s.done = cmd, make(chan struct{})
	go func(done chan struct{}) {
		_ = cmd.Wait()
		close(done)
	}(s.done)
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := s.rdb.Ping(ctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-s.done:
			return errors.New("redis-server exited at start (port taken?)")
		case <-time.After(20 * time.Millisecond):
		}
	}
	s.kill()
	return errors.New("redis-server did not answer within 10s")
}

func (s *server) kill() {
	if s.cmd != nil {
		_ = s.cmd.Process.Signal(syscall.SIGCONT)
		_ = s.cmd.Process.Kill()
		<-s.done
		s.cmd = nil
	}
}

func (s *server) Pause(on bool) (bool, error) {
	sig := syscall.SIGCONT
	if on {
		sig = syscall.SIGSTOP
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return true, nil // no process (a failed restart, the end): nothing to pause
	}
	return true, s.cmd.Process.Signal(sig)
}

// cont resumes a paused server, if it has a process.
func (s *server) cont() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		_ = s.cmd.Process.Signal(syscall.SIGCONT)
	}
}

func (s *server) Flush() error {
	s.cont() // a paused server would not answer
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return s.rdb.FlushAll(ctx).Err()
}

func (s *server) Restart(keep bool) (bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return true, s.start() // a restart that failed to start it before
	}
	_ = s.cmd.Process.Signal(syscall.SIGCONT)
	if keep {
		_ = s.rdb.ShutdownSave(ctx).Err() // the connection ends: the error says nothing
	} else {
		_ = s.rdb.ShutdownNoSave(ctx).Err()
	}
	select {
	case <-s.done:
	case <-ctx.Done():
		s.kill()
	}
	s.cmd = nil
	if !keep {
		_ = os.Remove(filepath.Join(s.dir, "dump.rdb"))
	}
	return true, s.start()
}

func (s *server) Close() {
	s.mu.Lock()
	s.kill()
	s.mu.Unlock()
	_ = s.rdb.Close()
	s.pp.give([]int{s.port})
	os.RemoveAll(s.dir)
}
