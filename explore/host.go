package explore

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/vigil-dev/vigil/explore/internal/hostproto"
	"github.com/vigil-dev/vigil/internal/faultproxy"
)

// host is one vigilhost process slot of the world: its id, its fault proxy
// (which stays across the process's restarts) and its current process.
type host struct {
	idx   int
	id    string
	proxy *faultproxy.Proxy
	bin   string
	cfg   hostproto.Config
	logf  *os.File            // the processes' stderr, appended
	onLag func(time.Duration) // a process said it was starved of CPU

	mu       sync.Mutex
	proc     *hostProc // nil while down
	stopping *hostProc // a process being stopped gracefully (not proc any more)
	starting bool      // a start is under way (the world retries until one works)
	refused  int       // faults cutting this host from Redis now (world.mu)
}

// hostProc is one run of vigilhost.
type hostProc struct {
	cmd      *exec.Cmd
	pid      int
	instance string
	began    time.Time

	mu      sync.Mutex
	stdin   io.WriteCloser
	nextID  int
	waiting map[int]chan hostproto.Message
	stopped chan hostproto.Message // the EvStopped line
	exited  chan struct{}
}

var errHostDown = errors.New("host is down")

// start runs a new vigilhost process and waits for it to start the
// supervisor (or fail: Redis may be unreachable).
func (h *host) start(extraEnv []string) (*hostProc, error) {
	data, _ := json.Marshal(h.cfg)
	cmd := exec.Command(h.bin, string(data))
	cmd.Env = append(os.Environ(), extraEnv...)
	cmd.Stderr = h.logf
	// Not its own process group: the explorer's Ctrl-C reaches it. The
	// explorer dies → the host gets SIGKILL (and its workers SIGTERM).
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start vigilhost %s: %w", h.id, err)
	}
	p := &hostProc{cmd: cmd, pid: cmd.Process.Pid, began: time.Now(), stdin: stdin,
		waiting: map[int]chan hostproto.Message{}, stopped: make(chan hostproto.Message, 1), exited: make(chan struct{})}
	first := make(chan hostproto.Message, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
		gotFirst := false
		for sc.Scan() {
			var m hostproto.Message
			if json.Unmarshal(sc.Bytes(), &m) != nil {
				continue
			}
			switch m.Ev {
			case hostproto.EvStarted, hostproto.EvFailed:
				if !gotFirst {
					gotFirst = true
					first <- m
				}
			case hostproto.EvReply:
				p.mu.Lock()
				ch := p.waiting[m.ID]
				delete(p.waiting, m.ID)
				p.mu.Unlock()
				if ch != nil {
					ch <- m
				}
			case hostproto.EvStopped:
				p.stopped <- m
			case hostproto.EvLag:
				if h.onLag != nil {
					h.onLag(m.Took)
				}
			}
		}
		_ = cmd.Wait() // reaped at once: a zombie would pass for a live host
		close(p.exited)
		if !gotFirst {
			first <- hostproto.Message{Ev: hostproto.EvFailed, Err: "exited before starting"}
		}
	}()
	select {
	case m := <-first:
		if m.Ev == hostproto.EvFailed {
			<-p.exited
			return nil, fmt.Errorf("host %s did not start: %s", h.id, m.Err)
		}
		p.instance = m.Instance
		return p, nil
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		<-p.exited
		return nil, fmt.Errorf("host %s did not start within 30s", h.id)
	}
}

// current returns the live process, nil when down.
func (h *host) current() *hostProc {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.proc
}

// take removes the live process from h, as being stopped, and returns it
// (nil when down): no other step acts on it.
func (h *host) take() *hostProc {
	h.mu.Lock()
	defer h.mu.Unlock()
	p := h.proc
	h.proc = nil
	if p != nil {
		h.stopping = p
	}
	return p
}

// processes returns the live and the stopping process.
func (h *host) processes() []*hostProc {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []*hostProc
	for _, p := range []*hostProc{h.proc, h.stopping} {
		if p != nil {
			out = append(out, p)
		}
	}
	return out
}

// request sends r and returns its answer, or an error if the process ends
// (or timeout passes) first.
func (p *hostProc) request(r hostproto.Request, timeout time.Duration) (hostproto.Message, error) {
	ch := make(chan hostproto.Message, 1)
	p.mu.Lock()
	p.nextID++
	r.ID = p.nextID
	p.waiting[r.ID] = ch
	data, _ := json.Marshal(r)
	_, err := p.stdin.Write(append(data, '\n'))
	p.mu.Unlock()
	if err != nil {
		return hostproto.Message{}, errHostDown
	}
	select {
	case m := <-ch:
		return m, nil
	case <-p.exited:
		return hostproto.Message{}, errHostDown
	case <-time.After(timeout):
		return hostproto.Message{}, fmt.Errorf("no answer within %s", timeout)
	}
}

// shutdown asks for a graceful stop and waits for the report and the
// process's end.
func (p *hostProc) shutdown(timeout time.Duration) (hostproto.Message, error) {
	p.mu.Lock()
	data, _ := json.Marshal(hostproto.Request{Op: hostproto.OpShutdown, Timeout: timeout})
	_, err := p.stdin.Write(append(data, '\n'))
	p.mu.Unlock()
	if err != nil {
		<-p.exited
		return hostproto.Message{}, errHostDown
	}
	// The leak check may take a couple of seconds after Stop returned.
	wait := timeout + StopTimeout + 10*time.Second
	select {
	case m := <-p.stopped:
		<-p.exited
		return m, nil
	case <-p.exited:
		select {
		case m := <-p.stopped:
			return m, nil
		default:
		}
		return hostproto.Message{}, errors.New("host exited without reporting its stop")
	case <-time.After(wait):
		p.kill()
		return hostproto.Message{}, fmt.Errorf("host did not stop within %s", wait)
	}
}

// kill SIGKILLs the process and waits until it is reaped.
func (p *hostProc) kill() {
	_ = p.cmd.Process.Kill()
	<-p.exited
}
