package supervisor

import (
	"bufio"
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/vigil-dev/vigil/health"
)

// process is one running child.
type process struct {
	cmd *exec.Cmd
	pid int
	// began is read before the fork: no beat of the process came earlier
	// (restartUnseen's bound for a process never read alive). started,
	// after it: start_timeout counts from there.
	began, started time.Time
	// slowGraced: a judgement of it was put off for a slow call of
	// restartUnseen's, and no beat of it has been read since.
	slowGraced bool
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
	reap.acquire()
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
	reap.release()
}

// BaseEnv lists the variables of the supervisor's environment every worker
// inherits; Config.InheritEnv adds to it. Nothing else of the supervisor's
// environment (its token, its cloud credentials) reaches a worker.
var BaseEnv = []string{"PATH", "HOME", "LANG", "TZ", "USER"}

// inherited returns the entries of environ whose names BaseEnv or extra
// allows (a trailing * in extra matches a prefix).
func inherited(environ, extra []string) []string {
	allowed := func(name string) bool {
		for _, n := range BaseEnv {
			if name == n {
				return true
			}
		}
		for _, n := range extra {
			if p, ok := strings.CutSuffix(n, "*"); ok && strings.HasPrefix(name, p) || name == n {
				return true
			}
		}
		return false
	}
	var out []string
	for _, kv := range environ {
		if name, _, ok := strings.Cut(kv, "="); ok && name != "" && allowed(name) {
			out = append(out, kv)
		}
	}
	return out
}

// workerEnv builds the child's environment: the allowed part of the
// supervisor's, the pool's env, then the VIGIL_* variables of docs/design.md
// §4.1 (later entries win).
func (s *Supervisor) workerEnv(p *Pool, id health.ComponentID, spawn string) []string {
	env := inherited(os.Environ(), s.cfg.InheritEnv)
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
		health.EnvRecoverMin+"="+hb.RecoverMin.String(),
		health.EnvRecoverMax+"="+hb.RecoverMax.String(),
		health.EnvShutdownTimeout+"="+(s.cfg.StopTimeout-time.Second).String(),
		health.EnvJobCrashRetries+"="+strconv.Itoa(s.cfg.Policy.CrashRetries()),
		health.EnvSpawn+"="+spawn,
	)
}

// spawnSeq numbers the spawns of this process (VIGIL_SPAWN_ID).
var spawnSeq atomic.Uint64

// captureGrace bounds how long output capture goes on once a worker and
// every descendant found are gone: something else holding the pipe open
// does not keep it (nor Stop) waiting.
const captureGrace = 500 * time.Millisecond

// startProcess spawns the pool's command for id in its own process group,
// with a parent-death signal, its output logged line by line. Once the
// leader has exited, what it left behind is stopped (see reap) and its
// output read to the end before the exit is reported.
func (s *Supervisor) startProcess(p *Pool, id health.ComponentID) (*process, error) {
	spawn := s.cfg.Instance + "." + strconv.FormatUint(spawnSeq.Add(1), 10)
	cmd := exec.Command(p.Command[0], p.Command[1:]...)
	cmd.Dir = p.Dir
	cmd.Env = s.workerEnv(p, id, spawn)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("spawn %s: pipe: %w", id, err)
	}
	cmd.Stdout, cmd.Stderr = w, w
	began := s.cfg.Clock.Now() // before the fork: the process beat no earlier
	// No pass of the reaper may see the new child before it is known as a
	// leader (whose exit status is os/exec's to collect).
	reap.mu.Lock()
	err = s.spawner.start(cmd)
	if err == nil {
		reap.started(cmd.Process.Pid, spawn, s.cfg.Clock)
	}
	reap.mu.Unlock()
	w.Close()
	if err != nil {
		r.Close()
		return nil, fmt.Errorf("spawn %s: %w", id, err)
	}
	proc := &process{cmd: cmd, pid: cmd.Process.Pid, began: began, started: s.cfg.Clock.Now()}
	captured := make(chan struct{})
	s.groups.add(proc.pid)
	s.wg.Add(2)
	go func() {
		defer s.wg.Done()
		defer close(captured)
		s.capture(id, proc.pid, r)
	}()
	go func() {
		defer s.wg.Done()
		err := cmd.Wait()
		waited := time.Now()
		s.groups.remove(proc.pid)
		at := s.cfg.Clock.Now()
		rec := reap.exited(proc.pid)
		// The exit is reported once what the worker left is gone. The
		// common case is told at once, before the reaper's pass (a scan of
		// /proc) competes for the CPU: the group is empty and the pipe
		// closes. Whatever still runs, having left the group, is found and
		// stopped all the same, and Stop waits for that.
		if syscall.Kill(-proc.pid, 0) == syscall.ESRCH && wait(captured, pipeCloses) {
			s.reportExit(exitMsg{id: id, at: at, waited: waited, pid: proc.pid, state: cmd.ProcessState, err: err})
			reap.clean(rec, at, s.cfg.StopTimeout, lookLater)
			<-rec.done
		} else {
			reap.clean(rec, at, s.cfg.StopTimeout, 0)
			<-rec.done
			_ = r.SetReadDeadline(time.Now().Add(captureGrace))
			<-captured
			if late := time.Since(waited); late > exitLate {
				s.log.Warn("worker exit told late: its output pipe or descendants outlived it", "component", id.String(),
					"pid", proc.pid, "late", late.Round(time.Millisecond))
			}
			s.reportExit(exitMsg{id: id, at: at, waited: waited, pid: proc.pid, state: cmd.ProcessState, err: err})
		}
		if rec.left > 0 {
			s.log.Warn("descendants of a worker survived SIGKILL", "component", id.String(), "pid", proc.pid, "left", rec.left)
		}
	}()
	return proc, nil
}

// exitLate is how long after a worker's exit (its reaping) telling or
// handling it may take before that is logged: the monitor's view of its
// workers is that late, and so are the operator actions and the Stop that
// wait for the exit (bounded at stop_timeout + 2 s), so the line says where
// the time went. A machine that stalls exiting processes makes such lines;
// the explorer's replay list (explore/testdata/seeds.txt) keeps those runs.
const exitLate = time.Second

// pipeCloses is how long the output pipe of an exited worker whose group
// is empty may take to close before the reaper looks for what holds it.
const pipeCloses = 50 * time.Millisecond

// lookLater is how long after a worker's exit was reported, its group
// empty, the reaper looks for what left the group: not while the exit is
// being recorded.
const lookLater = 100 * time.Millisecond

// wait reports whether ch is closed within d.
func wait(ch <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ch:
		return true
	case <-t.C:
		return false
	}
}

func (s *Supervisor) reportExit(m exitMsg) {
	select {
	case s.exits <- m:
	case <-s.dead:
	}
}

// capture logs the child's output line by line with its component, and
// keeps the last lines for the API. A line longer than MaxLogLine is cut
// there, with a marker saying how much was dropped; bytes that are not
// printable UTF-8 are kept as \xNN escapes. It reads until every writer
// has closed the pipe or the read deadline passes, never stopping early:
// a worker whose pipe closed would die of SIGPIPE at its next write.
func (s *Supervisor) capture(id health.ComponentID, pid int, r *os.File) {
	defer r.Close()
	max := s.cfg.MaxLogLine
	br := bufio.NewReaderSize(r, min(max, 64<<10))
	log := s.cfg.Logger.With(slog.String("component", id.String()), slog.Int("pid", pid))
	var line []byte
	dropped := 0
	emit := func() {
		text := escapeOutput(bytes.TrimSuffix(line, []byte("\r")))
		if dropped > 0 {
			text += " … [truncated " + strconv.Itoa(dropped) + " bytes]"
			s.cfg.Metrics.OutputTruncated(id.Queue)
		}
		s.logs.add(id, text)
		log.Info("worker output", slog.String("line", text))
		line, dropped = line[:0], 0
	}
	for {
		chunk, err := br.ReadSlice('\n')
		if err == nil {
			chunk = chunk[:len(chunk)-1]
		}
		take := min(len(chunk), max-len(line))
		line = append(line, chunk[:take]...)
		dropped += len(chunk) - take
		switch {
		case err == nil:
			emit()
		case err == bufio.ErrBufferFull:
		default: // EOF, the deadline, or a read error: the end
			if len(line) > 0 || dropped > 0 {
				emit()
			}
			return
		}
	}
}

// escapeOutput returns b as text: printable UTF-8 and tabs as they are,
// anything else escaped (\xNN for bytes, \uNNNN for unprintable runes).
func escapeOutput(b []byte) string {
	clean := true
	for _, c := range b {
		if c < 0x20 && c != '\t' || c >= 0x7f {
			clean = false
			break
		}
	}
	if clean {
		return string(b)
	}
	var sb strings.Builder
	for len(b) > 0 {
		r, n := utf8.DecodeRune(b)
		switch {
		case r == utf8.RuneError && n <= 1, r < 0x20 && r != '\t', r == 0x7f:
			fmt.Fprintf(&sb, "\\x%02x", b[0])
			n = 1
		case r >= 0x80 && !unicode.IsPrint(r):
			fmt.Fprintf(&sb, "\\u%04x", r)
		default:
			sb.Write(b[:n])
		}
		b = b[n:]
	}
	return sb.String()
}

// signalGroup sends sig to the child's whole process group.
func signalGroup(pid int, sig syscall.Signal) error {
	err := syscall.Kill(-pid, sig)
	reap.signalled(pid, sig)
	if err != nil && err != syscall.ESRCH {
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

// processStopped reports whether pid is stopped (SIGSTOP, or traced).
func processStopped(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(stat, ')')
	return i > 0 && i+2 < len(stat) && (stat[i+2] == 'T' || stat[i+2] == 't')
}

// logTail keeps the last lines each worker printed, at most max bytes of
// them per worker.
type logTail struct {
	mu    sync.Mutex
	max   int
	lines map[health.ComponentID]*tail
}

type tail struct {
	lines []string
	bytes int
}

func (t *logTail) add(id health.ComponentID, line string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	l := t.lines[id]
	if l == nil {
		l = &tail{}
		t.lines[id] = l
	}
	l.lines = append(l.lines, line)
	l.bytes += len(line)
	drop := 0
	for l.bytes > t.max && drop < len(l.lines) {
		l.bytes -= len(l.lines[drop])
		drop++
	}
	if drop > 0 {
		// Copy once the dropped head outgrows the kept part, so that the
		// backing array does not grow without bound.
		if l.lines = l.lines[drop:]; cap(l.lines) > 4*len(l.lines)+64 {
			l.lines = append([]string(nil), l.lines...)
		}
	}
}

// Logs returns the last lines the worker printed, oldest first (at most
// Config.LogTail bytes of them).
func (s *Supervisor) Logs(id health.ComponentID) []string {
	s.logs.mu.Lock()
	defer s.logs.mu.Unlock()
	if l := s.logs.lines[id]; l != nil {
		return append([]string(nil), l.lines...)
	}
	return nil
}

// killDescendants SIGKILLs, at once, the process group of every worker of
// this supervisor and whatever its exited workers left behind: for Stop,
// when its context ends before stop_timeout.
func (s *Supervisor) killDescendants() { reap.hurry(s.cfg.Instance) }
