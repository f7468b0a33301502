package explore

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// proc is a worker process as /proc shows it.
type proc struct {
	pid, ppid int
	state     byte   // R, S, D, T (stopped), Z (zombie), …
	start     uint64 // start time in clock ticks: with pid, the process's identity
	comp      string // VIGIL_COMPONENT, e.g. worker:a:0
	host      string // VIGIL_HOST
	prefix    string // VIGIL_PREFIX: the seed's, which tells its workers from others'
}

func (p proc) alive() bool { return p.state != 'Z' && p.state != 'X' && p.state != 0 }

// procTable reads processes, remembering each one's environment (it does
// not change) by pid and start time.
type procTable struct {
	mu  sync.Mutex
	env map[[2]uint64][3]string
}

func newProcTable() *procTable { return &procTable{env: map[[2]uint64][3]string{}} }

// children lists pid's children (every thread's).
func children(pid int) []int {
	dirs, _ := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/task/*/children")
	var out []int
	for _, d := range dirs {
		out = append(out, readChildren(d)...)
	}
	return out
}

func readChildren(path string) []int {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var out []int
	for _, f := range strings.Fields(string(b)) {
		if n, err := strconv.Atoi(f); err == nil {
			out = append(out, n)
		}
	}
	return out
}

// childScanner lists a process's children cheaply: a Go process has many
// threads but forks from few (the supervisor from its one spawner
// thread), so most looks read only the threads that had children, and
// every fifth reads them all.
type childScanner struct {
	mu    sync.Mutex
	n     int
	paths map[int][]string // pid → children files that listed a child
}

func (c *childScanner) children(pid int) []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.paths == nil {
		c.paths = map[int][]string{}
	}
	c.n++
	paths, known := c.paths[pid]
	if !known || c.n%5 == 0 {
		paths, _ = filepath.Glob("/proc/" + strconv.Itoa(pid) + "/task/*/children")
	}
	var out, with = []int(nil), []string(nil)
	for _, p := range paths {
		if kids := readChildren(p); len(kids) > 0 {
			out = append(out, kids...)
			with = append(with, p)
		}
	}
	c.paths[pid] = with
	return out
}

// stat reads pid's parent, state and start time.
func stat(pid int) (ppid int, state byte, start uint64, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, 0, false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return 0, 0, 0, false
	}
	f := strings.Fields(string(b[i+2:]))
	// f[0] state, f[1] ppid, …, f[19] starttime (field 22 of stat)
	if len(f) < 20 {
		return 0, 0, 0, false
	}
	ppid, _ = strconv.Atoi(f[1])
	start, _ = strconv.ParseUint(f[19], 10, 64)
	return ppid, f[0][0], start, true
}

// read returns pid as a worker process, ok false when it is gone or is no
// Vigil worker.
func (t *procTable) read(pid int) (proc, bool) {
	ppid, state, start, ok := stat(pid)
	if !ok {
		return proc{}, false
	}
	key := [2]uint64{uint64(pid), start}
	t.mu.Lock()
	env, known := t.env[key]
	t.mu.Unlock()
	if !known {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
		if err != nil && state != 'Z' {
			return proc{}, false
		}
		for _, kv := range bytes.Split(b, []byte{0}) {
			k, v, _ := strings.Cut(string(kv), "=")
			switch k {
			case "VIGIL_COMPONENT":
				env[0] = v
			case "VIGIL_HOST":
				env[1] = v
			case "VIGIL_PREFIX":
				env[2] = v
			}
		}
		// A zombie's environment reads empty, and so does that of a
		// process caught inside execve: its parent has seen the exec
		// succeed (os/exec's close-on-exec pipe) before the kernel set up
		// the new environment. Neither is kept: read it again next time.
		if state != 'Z' && len(b) > 0 {
			t.mu.Lock()
			t.env[key] = env
			t.mu.Unlock()
		}
	}
	if env[0] == "" && state != 'Z' {
		return proc{}, false
	}
	return proc{pid: pid, ppid: ppid, state: state, start: start, comp: env[0], host: env[1], prefix: env[2]}, true
}

// bootTime is when the machine booted (/proc/stat btime): process start
// times in /proc/<pid>/stat count clock ticks from it.
var bootTime = func() time.Time {
	b, err := os.ReadFile("/proc/stat")
	if err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "btime "); ok {
				if n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil {
					return time.Unix(n, 0)
				}
			}
		}
	}
	return time.Time{}
}()

// clockTicks is USER_HZ, 100 on every Linux the explorer runs on.
const clockTicks = 100

// started is when p started (to 10 ms), zero if unknown.
func (p proc) started() time.Time {
	if bootTime.IsZero() {
		return time.Time{}
	}
	return bootTime.Add(time.Duration(p.start) * time.Second / clockTicks)
}

// reap collects an orphan that exited (the explorer is the subreaper its
// orphans come to), so that its pid does not linger as a zombie.
func reap(pid int) {
	var ws syscall.WaitStatus
	_, _ = syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
}

// becomeSubreaper makes orphans of this process's descendants its children
// (PR_SET_CHILD_SUBREAPER) rather than init's: the explorer sees them, and
// reaps them.
func becomeSubreaper() error {
	const prSetChildSubreaper = 36
	if _, _, e := syscall.RawSyscall6(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0, 0, 0, 0); e != 0 {
		return e
	}
	return nil
}

// procWhere describes where process pid is now, for a log line: its state
// and the kernel function it sleeps in (wchan), or that it is gone; then
// each of its other threads the same way, with the top of the kernel stack
// of any not asleep in the ordinary way: a zombie leader whose parent
// cannot collect it yet is waiting for its other threads to finish
// exiting, which is where a worker reaped seconds after its exit line
// waits (TestProcWhereNamesThreads).
func procWhere(pid int) string {
	_, state, _, ok := stat(pid)
	if !ok {
		return fmt.Sprintf("%d gone", pid)
	}
	dir := "/proc/" + strconv.Itoa(pid)
	out := fmt.Sprintf("%d %c %s", pid, state, readTrim(dir+"/wchan"))
	tids, _ := os.ReadDir(dir + "/task")
	var threads []string
	for _, t := range tids {
		if t.Name() == strconv.Itoa(pid) {
			continue
		}
		threads = append(threads, taskWhere(dir+"/task/"+t.Name(), t.Name()))
	}
	if len(threads) > 0 {
		out += " [threads: " + strings.Join(threads, "; ") + "]"
	}
	return out
}

// taskWhere describes one task (thread) by its /proc directory: its state,
// its wchan, and for a task in D (or any state but S) the first frames of
// its kernel stack.
func taskWhere(dir, tid string) string {
	b, _ := os.ReadFile(dir + "/stat")
	state, ok := statState(b)
	if !ok {
		return tid + " gone"
	}
	out := fmt.Sprintf("%s %c %s", tid, state, readTrim(dir+"/wchan"))
	if state != 'S' {
		out += " {" + kernelStack(dir, 4) + "}"
	}
	return out
}

// kernelStack returns the first n frames of a task's kernel stack
// (/proc/<pid>/task/<tid>/stack, root only), joined by " < ".
func kernelStack(dir string, n int) string {
	var frames []string
	for _, l := range strings.Split(readTrim(dir+"/stack"), "\n") {
		if f := strings.Fields(l); len(f) == 2 {
			frames = append(frames, f[1])
		}
		if len(frames) == n {
			break
		}
	}
	return strings.Join(frames, " < ")
}

// blockedTasks lists, for a log line, every task of the machine in
// uninterruptible sleep (D) with the top of its kernel stack, at most limit
// of them: workers of every host that exit late together wait on
// something they share, and a task stuck in the kernel (a journal commit,
// a writeback) would name it.
func blockedTasks(limit int) string {
	pids, _ := os.ReadDir("/proc")
	var out []string
	for _, p := range pids {
		if _, err := strconv.Atoi(p.Name()); err != nil {
			continue
		}
		tids, _ := os.ReadDir("/proc/" + p.Name() + "/task")
		for _, t := range tids {
			dir := "/proc/" + p.Name() + "/task/" + t.Name()
			b, _ := os.ReadFile(dir + "/stat")
			if state, ok := statState(b); !ok || state != 'D' {
				continue
			}
			comm := ""
			if i, j := bytes.LastIndexByte(b, ')'), bytes.IndexByte(b, '('); j >= 0 && j < i {
				comm = string(b[j+1 : i])
			}
			out = append(out, fmt.Sprintf("%s/%s %s {%s}", p.Name(), t.Name(), comm, kernelStack(dir, 4)))
			if len(out) == limit {
				return strings.Join(out, "; ") + "; …"
			}
		}
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, "; ")
}

// alive reports whether pid is a live process: it exists and is no
// zombie (a zombie is dead, waiting for its parent to collect it).
func alive(pid int) bool {
	_, state, _, ok := stat(pid)
	return ok && state != 'Z'
}

// statState returns the state letter of a /proc stat line (after the
// command's closing parenthesis), ok false for a short or empty one.
func statState(b []byte) (byte, bool) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return 0, false
	}
	return b[i+2], true
}

func readTrim(path string) string {
	b, _ := os.ReadFile(path)
	return strings.TrimSpace(string(b))
}

// sortedKeys returns the pids of set in order.
func sortedKeys(set map[int]bool) []int {
	out := make([]int, 0, len(set))
	for pid := range set {
		out = append(out, pid)
	}
	slices.Sort(out)
	return out
}
