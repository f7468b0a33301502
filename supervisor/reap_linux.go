package supervisor

import (
	"bytes"
	"errors"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/internal/clock"
)

// Descendants of workers (docs/design.md §4.5). When a worker's leader
// exits — crash or stop — whatever it left behind gets SIGTERM, then
// SIGKILL once stop_timeout has passed since the first SIGTERM its group got.
// Nothing a worker started outlives it, nor is left a zombie
// (TestDescendantsDieWithACrashedWorker, TestDescendantsDieWithAStoppedWorker,
// TestDescendantsDieWithTheSupervisor):
//
//   - its process group (every worker is a group leader) holds the
//     descendants that did not leave it;
//   - the supervisor's process is a child subreaper (PR_SET_CHILD_SUBREAPER)
//     while supervisors run, so that a descendant whose parent died becomes
//     its child instead of init's. Those that left the group (setsid,
//     setpgid) are recognised by the VIGIL_SPAWN_ID they inherited, or by
//     having been seen as a descendant of the worker before their parent
//     died;
//   - zombies of such adopted descendants are reaped by pid (wait4 on that
//     pid only). wait4(-1) is never called: it would take the exit status
//     os/exec's cmd.Wait needs of the worker leaders, and of any child the
//     embedding program runs.
//
// Without /proc, only the process group is signalled (the fallback). A
// descendant that leaves the group and also replaces its environment before
// its parent dies is not found (a cgroup per worker would be needed).
//
// The subreaper flag belongs to the whole OS process, so this state is the
// process's, shared by every Supervisor in it.
var reap = &reaper{
	leaders:  map[int]struct{}{},
	spawns:   map[string]*spawnRec{},
	groups:   map[int]*spawnRec{},
	known:    map[int]known{},
	cleaning: map[*spawnRec]struct{}{},
}

// killGrace is how long a cleanup waits, after SIGKILL, for what it killed
// to be gone (a process in uninterruptible sleep dies only when it wakes).
const killGrace = time.Second

// reapPoll is how often a pending cleanup looks whether what it signalled
// is gone (processes that are not the supervisor's children send no signal
// when they exit).
const reapPoll = 20 * time.Millisecond

// chldDelay is how long a SIGCHLD waits for its pass.
const chldDelay = 20 * time.Millisecond

type reaper struct {
	mu       sync.Mutex
	users    int              // running supervisors
	leaders  map[int]struct{} // worker leaders: os/exec waits for them, never reaped here
	spawns   map[string]*spawnRec
	groups   map[int]*spawnRec      // by process group id (the leader's pid)
	known    map[int]known          // attribution of processes seen, by pid
	cleaning map[*spawnRec]struct{} // spawns being cleaned up
	self     int
	prevSub  int // PR_GET_CHILD_SUBREAPER before the first user
	wake     chan struct{}
	stop     chan struct{}
	done     chan struct{}
	noProc   bool // /proc unreadable: process groups only
}

// spawnRec is one start of one worker.
type spawnRec struct {
	id     string
	pgid   int
	clock  clock.Clock
	termAt time.Time // first SIGTERM to the group (zero: none yet)
	killed bool      // SIGKILL sent to the group
	// Set once the leader has exited: the cleanup, from after on (real
	// time: a scheduling delay, not a timeout of the policy).
	cleaning bool
	after    time.Time
	deadline time.Time
	termed   bool
	done     chan struct{}
	left     int // processes still there at the last pass
}

// known is what a pass concluded about one process: the spawn it belongs
// to ("" = none of ours), valid while the process has the same start time.
type known struct {
	spawn string
	start uint64
}

// acquire makes the process a subreaper and starts the reaping goroutine
// for the first running supervisor.
func (r *reaper) acquire() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.users++
	if r.users > 1 {
		return
	}
	r.self = os.Getpid()
	var prev int32
	_ = unix.Prctl(unix.PR_GET_CHILD_SUBREAPER, uintptr(unsafe.Pointer(&prev)), 0, 0, 0)
	r.prevSub = int(prev)
	_ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
	_, err := os.Stat("/proc/self/stat")
	r.noProc = err != nil
	r.wake, r.stop, r.done = make(chan struct{}, 1), make(chan struct{}), make(chan struct{})
	go r.run(r.wake, r.stop, r.done)
}

// release undoes acquire once the last supervisor has stopped.
func (r *reaper) release() {
	r.mu.Lock()
	r.users--
	if r.users > 0 {
		r.mu.Unlock()
		return
	}
	stop, done := r.stop, r.done
	if r.prevSub == 0 {
		_ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
	}
	r.mu.Unlock()
	close(stop)
	<-done
}

// started registers a worker leader; call it with r.mu held by lockStart,
// so that no pass sees the new child before it is known as a leader.
func (r *reaper) started(pid int, spawn string, clk clock.Clock) {
	rec := &spawnRec{id: spawn, pgid: pid, clock: clk}
	r.leaders[pid] = struct{}{}
	r.spawns[spawn] = rec
	r.groups[pid] = rec
}

// signalled notes a signal sent to the group pgid.
func (r *reaper) signalled(pgid int, sig syscall.Signal) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rec := r.groups[pgid]
	if rec == nil {
		return
	}
	switch sig {
	case syscall.SIGTERM:
		if rec.termAt.IsZero() {
			rec.termAt = rec.clock.Now()
		}
	case syscall.SIGKILL:
		rec.killed = true
		if rec.cleaning && rec.clock.Now().Before(rec.deadline) {
			rec.deadline = rec.clock.Now()
			r.poke()
		}
	}
}

// exited forgets the leader pid once os/exec has waited for it, and returns
// the spawn's record for clean.
func (r *reaper) exited(pid int) *spawnRec {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.leaders, pid)
	rec := r.groups[pid]
	if rec == nil {
		rec = &spawnRec{}
	}
	rec.done = make(chan struct{})
	if rec.id == "" {
		close(rec.done)
	}
	return rec
}

// clean starts the cleanup of rec: rec.done is closed when nothing of it is
// left, or when what is left survived SIGKILL for killGrace (rec.left says
// how many). at is when the leader exited, grace the stop timeout: SIGKILL
// follows grace after the group's first SIGTERM or the exit, whichever
// came first.
func (r *reaper) clean(rec *spawnRec, at time.Time, grace, after time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if rec.id == "" || rec.cleaning {
		return
	}
	from := at
	if !rec.termAt.IsZero() && rec.termAt.Before(at) {
		from = rec.termAt
	}
	rec.cleaning, rec.deadline, rec.after = true, from.Add(grace), time.Now().Add(after)
	if rec.killed {
		rec.deadline = at
	}
	r.cleaning[rec] = struct{}{}
	if after <= 0 {
		r.poke()
	}
}

// due reports whether a cleanup needs a pass now.
func (r *reaper) due() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for rec := range r.cleaning {
		if !time.Now().Before(rec.after) {
			return true
		}
	}
	return false
}

// hurry sets every cleanup's deadline to now and SIGKILLs the groups of
// the spawns of instance (Stop's context ended).
func (r *reaper) hurry(instance string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for id, rec := range r.spawns {
		if spawnInstance(id) == instance {
			rec.deadline, rec.killed = rec.clock.Now(), true
			_ = syscall.Kill(-rec.pgid, syscall.SIGKILL)
		}
	}
	r.poke()
}

func spawnInstance(spawn string) string {
	if i := bytes.LastIndexByte([]byte(spawn), '.'); i >= 0 {
		return spawn[:i]
	}
	return spawn
}

func (r *reaper) poke() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// run makes a pass on every wake-up, every reapPoll while cleanups are
// pending, and chldDelay after a SIGCHLD (zombies can wait a little: the
// exit that sent it is being reported meanwhile).
func (r *reaper) run(wake, stop, done chan struct{}) {
	defer close(done)
	chld := make(chan os.Signal, 1)
	signal.Notify(chld, syscall.SIGCHLD)
	defer signal.Stop(chld)
	t := time.NewTicker(reapPoll)
	defer t.Stop()
	var due <-chan time.Time
	for {
		select {
		case <-stop:
			return
		case <-chld:
			if due == nil {
				due = time.After(chldDelay)
			}
			continue
		case <-due:
			if !r.adoptedZombie() && !r.due() {
				due = nil
				continue
			}
		case <-wake:
		case <-t.C:
			if !r.due() {
				continue
			}
		}
		due = nil
		r.pass()
	}
}

// adoptedZombie reports whether a child of this process other than a
// worker leader may be a zombie: the SIGCHLD pass is needed only then (to
// reap it). Most SIGCHLDs come from a worker leader, which os/exec reaps
// (by the time the pass is due, 20 ms later, it has), and the pass, a
// read of every /proc/<pid>/stat of the machine, would be most of the
// supervisor's CPU at every worker's crash, in the latency from a kill to
// its crashed record (BenchmarkKillToCrashed). waitid with
// WNOWAIT peeks at one exited child without reaping it: none, no need;
// any other (a leader os/exec has not reaped yet hides the others behind
// it), the pass runs.
func (r *reaper) adoptedZombie() bool {
	var info unix.Siginfo
	err := unix.Waitid(pAll, 0, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
	if err != nil {
		return !errors.Is(err, unix.ECHILD) // no child at all: no zombie
	}
	// siginfo_t's si_pid follows si_signo, si_errno, si_code and padding.
	pid := int(*(*int32)(unsafe.Add(unsafe.Pointer(&info), 16)))
	return pid != 0
}

// pAll is waitid's P_ALL: any child.
const pAll = 0

// proc is one line of /proc/<pid>/stat.
type proc struct {
	ppid, pgrp int
	state      byte
	start      uint64
}

// readProcs lists the system's processes from /proc.
func readProcs() (map[int]proc, error) {
	d, err := os.Open("/proc")
	if err != nil {
		return nil, err
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return nil, err
	}
	out := make(map[int]proc, len(names))
	buf := make([]byte, 1024)
	for _, n := range names {
		pid, err := strconv.Atoi(n)
		if err != nil {
			continue
		}
		if p, ok := readStat(pid, buf); ok {
			out[pid] = p
		}
	}
	return out, nil
}

func readStat(pid int, buf []byte) (proc, bool) {
	fd, err := syscall.Open("/proc/"+strconv.Itoa(pid)+"/stat", syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return proc{}, false
	}
	n, err := syscall.Read(fd, buf)
	syscall.Close(fd)
	if err != nil || n <= 0 {
		return proc{}, false
	}
	b := buf[:n]
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return proc{}, false
	}
	f := bytes.Fields(b[i+2:])
	if len(f) < 20 {
		return proc{}, false
	}
	ppid, _ := strconv.Atoi(string(f[1]))
	pgrp, _ := strconv.Atoi(string(f[2]))
	start, _ := strconv.ParseUint(string(f[19]), 10, 64)
	return proc{ppid: ppid, pgrp: pgrp, state: f[0][0], start: start}, true
}

// spawnOf reads pid's VIGIL_SPAWN_ID ("" if none or unreadable).
func spawnOf(pid int) string {
	env, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil {
		return ""
	}
	key := []byte(health.EnvSpawn + "=")
	for kv := range bytes.SplitSeq(env, []byte{0}) {
		if v, ok := bytes.CutPrefix(kv, key); ok {
			return string(v)
		}
	}
	return ""
}

// pass attributes the system's processes to spawns, reaps the zombies of
// adopted descendants, and moves every cleanup on.
func (r *reaper) pass() {
	procs, err := readProcs()
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil || r.noProc {
		r.passGroups()
		return
	}
	owner := make(map[int]string, len(procs))
	var resolve func(pid int, depth int) string
	resolve = func(pid int, depth int) string {
		if o, ok := owner[pid]; ok {
			return o
		}
		p, ok := procs[pid]
		if !ok || pid <= 1 || pid == r.self {
			return ""
		}
		o, cached := "", false
		if k, ok := r.known[pid]; ok && k.start == p.start && (k.spawn == "" || r.spawns[k.spawn] != nil) {
			o, cached = k.spawn, true
		}
		switch {
		case cached:
		case r.groups[p.pgrp] != nil:
			o = r.groups[p.pgrp].id
		case p.ppid == r.self || p.ppid == 1:
			// Orphaned: adopted by this process (subreaper) or by init.
			if _, leader := r.leaders[pid]; !leader && p.state != 'Z' {
				if s := spawnOf(pid); r.spawns[s] != nil {
					o = s
				}
			}
		case depth < 64:
			o = resolve(p.ppid, depth+1)
		}
		owner[pid] = o
		if p.state != 'Z' {
			r.known[pid] = known{spawn: o, start: p.start}
		}
		return o
	}
	left := map[string][]int{}
	for pid, p := range procs {
		o := resolve(pid, 0)
		if o == "" {
			continue
		}
		if p.state == 'Z' {
			if _, leader := r.leaders[pid]; !leader && p.ppid == r.self {
				var ws syscall.WaitStatus
				_, _ = syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
			}
			continue
		}
		left[o] = append(left[o], pid)
	}
	for pid := range r.known {
		if _, ok := procs[pid]; !ok {
			delete(r.known, pid)
		}
	}
	for rec := range r.cleaning {
		if !time.Now().Before(rec.after) {
			r.advance(rec, left[rec.id])
		}
	}
}

// passGroups is the pass without /proc: each cleanup looks at its process
// group only.
func (r *reaper) passGroups() {
	for rec := range r.cleaning {
		var left []int
		if syscall.Kill(-rec.pgid, 0) == nil {
			left = []int{-rec.pgid}
		}
		r.advance(rec, left)
	}
}

// advance signals what is left of rec (pids; a negative one is a group):
// SIGTERM once, SIGKILL from the deadline on; rec is done when nothing is
// left.
func (r *reaper) advance(rec *spawnRec, left []int) {
	rec.left = len(left)
	now := rec.clock.Now()
	if len(left) == 0 || now.After(rec.deadline.Add(killGrace)) {
		rec.cleaning = false
		close(rec.done)
		delete(r.cleaning, rec)
		delete(r.spawns, rec.id)
		delete(r.groups, rec.pgid)
		return
	}
	sig := syscall.SIGTERM
	switch {
	case !rec.deadline.After(now):
		sig = syscall.SIGKILL
	case rec.termed:
		return
	}
	rec.termed = true
	for _, pid := range left {
		_ = syscall.Kill(pid, sig)
	}
	_ = syscall.Kill(-rec.pgid, sig)
}
