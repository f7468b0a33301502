package testtopo

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Proc is one redis-server process of a topology.
type Proc struct {
	Port int
	Name string // "master", "replica", "sentinel", "node3"

	dir  string
	args []string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// Addr is the process's loopback address.
func (p *Proc) Addr() string { return "127.0.0.1:" + strconv.Itoa(p.Port) }

// PID is the running process's pid (0 when stopped).
func (p *Proc) PID() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// start runs redis-server with p's arguments, its log in its directory.
func (p *Proc) start(tb testing.TB) {
	tb.Helper()
	log, err := os.OpenFile(filepath.Join(p.dir, p.Name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		tb.Fatal(err)
	}
	defer log.Close()
	cmd := exec.Command("redis-server", p.args...)
	cmd.Dir, cmd.Stdout, cmd.Stderr = p.dir, log, log
	if err := cmd.Start(); err != nil {
		tb.Fatalf("start %s (redis-server %v): %v", p.Name, p.args, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	p.mu.Lock()
	p.cmd, p.done = cmd, done
	p.mu.Unlock()
	if err := waitPing(p.Addr(), 10*time.Second); err != nil {
		tb.Fatalf("%s on %s: %v (log %s)", p.Name, p.Addr(), err, filepath.Join(p.dir, p.Name+".log"))
	}
}

// Kill sends SIGKILL to the process (by its pid) and waits until it is
// reaped; it returns when that happened.
func (p *Proc) Kill() time.Time {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.cmd = nil
	p.mu.Unlock()
	if cmd == nil {
		return time.Now()
	}
	at := time.Now()
	_ = syscall.Kill(cmd.Process.Pid, syscall.SIGKILL)
	<-done
	return at
}

// Restart starts a killed process again with the same arguments (a killed
// master comes back and its sentinel or cluster makes it a replica).
func (p *Proc) Restart(tb testing.TB) {
	tb.Helper()
	p.start(tb)
}

// Client is a plain client of this one process.
func (p *Proc) Client() *redis.Client {
	return redis.NewClient(&redis.Options{Addr: p.Addr(), DialTimeout: 200 * time.Millisecond,
		ReadTimeout: 500 * time.Millisecond, MaxRetries: -1})
}

// Role is what ROLE answers first ("master", "slave", "sentinel"), or an
// error.
func (p *Proc) Role(ctx context.Context) (string, error) {
	c := p.Client()
	defer c.Close()
	v, err := c.Do(ctx, "ROLE").Slice()
	if err != nil {
		return "", err
	}
	if len(v) == 0 {
		return "", fmt.Errorf("ROLE: empty answer")
	}
	s, _ := v[0].(string)
	return s, nil
}

func waitPing(addr string, within time.Duration) error {
	c := redis.NewClient(&redis.Options{Addr: addr, DialTimeout: 200 * time.Millisecond, MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(within)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no PONG within %s: %w", within, err)
		}
		time.Sleep(20 * time.Millisecond) // polling an external process, not a goroutine
	}
}

// poll calls f every 5 ms until it reports done or ctx ends.
func poll(ctx context.Context, f func() (bool, error)) error {
	var last error
	for {
		ok, err := f()
		if ok {
			return nil
		}
		if err != nil {
			last = err
		}
		select {
		case <-ctx.Done():
			if last != nil {
				return fmt.Errorf("%w (last: %v)", ctx.Err(), last)
			}
			return ctx.Err()
		case <-time.After(5 * time.Millisecond): // polling an external process
		}
	}
}

// stop kills the process if it runs.
func (p *Proc) stop() { p.Kill() }

// need skips tb when a binary is missing.
func need(tb testing.TB, bins ...string) {
	tb.Helper()
	for _, b := range bins {
		if _, err := exec.LookPath(b); err != nil {
			tb.Skipf("%s not installed (Debian: apt-get install redis-server redis-tools)", b)
		}
	}
}

func newProc(tb testing.TB, dir, name string, port int, args ...string) *Proc {
	tb.Helper()
	p := &Proc{Port: port, Name: name, dir: dir}
	p.args = append([]string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dbfilename", "dump-" + strconv.Itoa(port) + ".rdb"}, args...)
	tb.Cleanup(p.stop)
	return p
}

// StartServer starts a standalone redis-server on port (the failover
// suite's job ledger lives in one, apart from the topology under test).
func StartServer(tb testing.TB, port int) *Proc {
	tb.Helper()
	need(tb, "redis-server")
	p := newProc(tb, tb.TempDir(), "server", port)
	p.start(tb)
	return p
}

// Pause stops the process (SIGSTOP): it keeps its connections and data
// but answers nothing, as a frozen or partitioned server. It returns when
// it was sent.
func (p *Proc) Pause() time.Time {
	if pid := p.PID(); pid != 0 {
		_ = syscall.Kill(pid, syscall.SIGSTOP)
	}
	return time.Now()
}

// Resume continues a paused process (SIGCONT).
func (p *Proc) Resume() time.Time {
	if pid := p.PID(); pid != 0 {
		_ = syscall.Kill(pid, syscall.SIGCONT)
	}
	return time.Now()
}
