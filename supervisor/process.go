package supervisor

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/vigil-dev/vigil/health"
)

// process is one running child.
type process struct {
	cmd     *exec.Cmd
	pid     int
	started time.Time
}

// spawner starts children from one goroutine locked to its OS thread for
// the supervisor's whole life: a child's parent-death signal fires when the
// thread that forked it exits (golang/go#27505), so that thread must not
// exit before the children do.
type spawner struct {
	reqs chan spawnReq
	done chan struct{}
}

type spawnReq struct {
	cmd   *exec.Cmd
	reply chan error
}

func newSpawner() *spawner {
	s := &spawner{reqs: make(chan spawnReq), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		for r := range s.reqs {
			r.reply <- r.cmd.Start()
		}
	}()
	return s
}

func (s *spawner) start(cmd *exec.Cmd) error {
	reply := make(chan error, 1)
	s.reqs <- spawnReq{cmd: cmd, reply: reply}
	return <-reply
}

// close ends the spawner; call it only once every child is gone.
func (s *spawner) close() {
	close(s.reqs)
	<-s.done
}

// workerEnv builds the child's environment.
func (s *Supervisor) workerEnv(p *Pool, id health.ComponentID) []string {
	env := os.Environ()
	for k, v := range p.Env {
		env = append(env, k+"="+v)
	}
	hb := s.cfg.Heartbeat
	return append(env,
		health.EnvRedisURL+"="+s.cfg.RedisURL,
		health.EnvPrefix+"="+s.store.Keys().Prefix,
		health.EnvComponent+"="+id.String(),
		health.EnvQueue+"="+id.Queue,
		health.EnvSlot+"="+strconv.Itoa(id.Slot),
		health.EnvHost+"="+s.cfg.Host,
		health.EnvConcurrency+"="+strconv.Itoa(p.Concurrency),
		health.EnvTaskTimeout+"="+p.TaskTimeout.String(),
		health.EnvHeartbeatInterval+"="+hb.Interval.String(),
		health.EnvHeartbeatTTL+"="+hb.TTL.String(),
		health.EnvShutdownTimeout+"="+(s.cfg.StopTimeout-time.Second).String(),
		health.EnvJobCrashRetries+"="+strconv.Itoa(s.cfg.Policy.JobCrashRetries),
	)
}

// startProcess spawns the pool's command for id in its own process group,
// with a parent-death signal, its output logged line by line.
func (s *Supervisor) startProcess(p *Pool, id health.ComponentID) (*process, error) {
	cmd := exec.Command(p.Command[0], p.Command[1:]...)
	cmd.Dir = p.Dir
	cmd.Env = s.workerEnv(p, id)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("spawn %s: pipe: %w", id, err)
	}
	cmd.Stdout, cmd.Stderr = w, w
	err = s.spawner.start(cmd)
	w.Close()
	if err != nil {
		r.Close()
		return nil, fmt.Errorf("spawn %s: %w", id, err)
	}
	proc := &process{cmd: cmd, pid: cmd.Process.Pid, started: s.cfg.Clock.Now()}
	s.wg.Add(2)
	go func() {
		defer s.wg.Done()
		s.capture(id, proc.pid, r)
	}()
	go func() {
		defer s.wg.Done()
		err := cmd.Wait()
		select {
		case s.exits <- exitMsg{id: id, at: s.cfg.Clock.Now(), pid: proc.pid, state: cmd.ProcessState, err: err}:
		case <-s.dead:
		}
	}()
	return proc, nil
}

// capture logs the child's output line by line with its component, and
// keeps the last lines for the API.
func (s *Supervisor) capture(id health.ComponentID, pid int, r io.ReadCloser) {
	defer r.Close()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 64*1024)
	log := s.cfg.Logger.With(slog.String("component", id.String()), slog.Int("pid", pid))
	for sc.Scan() {
		line := sc.Text()
		s.logs.add(id, line)
		log.Info("worker output", slog.String("line", line))
	}
}

// signalGroup sends sig to the child's whole process group.
func signalGroup(pid int, sig syscall.Signal) error {
	if err := syscall.Kill(-pid, sig); err != nil && err != syscall.ESRCH {
		return fmt.Errorf("signal %d to group %d: %w", sig, pid, err)
	}
	return nil
}

// ownedProcessAlive reports whether pid is alive and is a worker for id (its
// environment names the component), so that a recycled pid is never taken
// for a worker. Zombies count as gone.
func ownedProcessAlive(pid int, id health.ComponentID) bool {
	if pid <= 0 {
		return false
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	if i := bytes.LastIndexByte(stat, ')'); i > 0 && i+2 < len(stat) && stat[i+2] == 'Z' {
		return false
	}
	env, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil {
		return false
	}
	want := []byte(health.EnvComponent + "=" + id.String() + "\x00")
	return bytes.Contains(append(env, 0), want)
}

// logTail keeps the last lines each worker printed.
type logTail struct {
	mu    sync.Mutex
	max   int
	lines map[health.ComponentID][]string
}

func (t *logTail) add(id health.ComponentID, line string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	l := append(t.lines[id], line)
	if len(l) > t.max {
		l = l[len(l)-t.max:]
	}
	t.lines[id] = l
}

// Logs returns the last lines the worker printed, oldest first.
func (s *Supervisor) Logs(id health.ComponentID) []string {
	s.logs.mu.Lock()
	defer s.logs.mu.Unlock()
	return append([]string(nil), s.logs.lines[id]...)
}
