package explore

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A process's start time read from /proc is close to when it started, and
// its worker environment is read.
func TestProcStarted(t *testing.T) {
	began := time.Now()
	cmd := exec.Command("sleep", "5")
	cmd.Env = append(os.Environ(), "VIGIL_COMPONENT=worker:a:1", "VIGIL_HOST=h7", "VIGIL_PREFIX=px:")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	// os/exec's Start returns once the exec has begun, which can be
	// before the kernel set up the new environment: read until it is
	// there.
	table := newProcTable()
	p, ok := table.read(cmd.Process.Pid)
	for deadline := time.Now().Add(2 * time.Second); !ok && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond) // polling /proc, not waiting for a goroutine
		p, ok = table.read(cmd.Process.Pid)
	}
	if !ok || p.comp != "worker:a:1" || p.host != "h7" || p.prefix != "px:" || !p.alive() {
		t.Fatalf("read %+v %v", p, ok)
	}
	// btime is whole seconds: the start time may be up to a second early.
	if d := p.started().Sub(began); d < -1100*time.Millisecond || d > time.Second {
		t.Fatalf("started %s from the moment it was started", d)
	}
	found := false
	for _, c := range children(os.Getpid()) {
		found = found || c == cmd.Process.Pid
	}
	if !found {
		t.Fatal("the child is not among this process's children")
	}
}

// procWhere names every thread of a process (E43's evidence: a zombie
// leader waits for its other threads), and a stopped one with its kernel
// stack; a gone process is said gone.
func TestProcWhereNamesThreads(t *testing.T) {
	got := procWhere(os.Getpid()) // a Go test binary: several threads
	if !strings.Contains(got, "[threads: ") {
		t.Fatalf("procWhere of this process: %q", got)
	}
	cmd := sleeper(t)
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	dir := "/proc/" + strconv.Itoa(cmd.Process.Pid) + "/task/" + strconv.Itoa(cmd.Process.Pid)
	where := taskWhere(dir, "x")
	for deadline := time.Now().Add(2 * time.Second); !strings.HasPrefix(where, "x T") && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond) // polling /proc for the stop to take hold
		where = taskWhere(dir, "x")
	}
	if !strings.HasPrefix(where, "x T") || !strings.Contains(where, "{") {
		t.Fatalf("a stopped task: %q", where)
	}
	if got := procWhere(1 << 30); got != fmt.Sprint(1<<30)+" gone" {
		t.Fatalf("a gone process: %q", got)
	}
	_ = blockedTasks(3) // reads the whole machine without failing
}

// The beat watchdog says where a healthy worker that has not beaten for
// half a TTL is (its state, from /proc), once per half a TTL, and stays
// quiet for a worker beating, not healthy, not the record's process, a
// fault's target, or while a host is disturbed.
func TestBeatWatchdog(t *testing.T) {
	cmd := sleeper(t)
	pid := cmd.Process.Pid
	at := time.Now()
	w := &world{b: newBook(at, nil)}
	snap := func(status string, recPID int, left time.Duration) snapshot {
		return snapshot{at: at,
			sup:     map[string][]proc{"h0": {{pid: pid, comp: "worker:a:0", host: "h0"}}},
			records: map[string]record{"worker:a:0": {status: status, pid: strconv.Itoa(recPID)}},
			hbLeft:  map[string]time.Duration{"worker:a:0": left}}
	}
	watched := map[int]time.Time{}
	quiet := func(name string, s snapshot) {
		t.Helper()
		w.watchBeats(s, watched)
		if l := w.b.log(); l != "" {
			t.Fatalf("%s: logged %q", name, l)
		}
	}
	quiet("beating", snap("healthy", pid, 900*time.Millisecond))
	quiet("starting", snap("starting", pid, -2))
	quiet("another process's record", snap("healthy", pid+1, 300*time.Millisecond))
	quiet("no TTL", snap("healthy", pid, -1))

	w.watchBeats(snap("healthy", pid, 300*time.Millisecond), watched)
	want := fmt.Sprintf("beat watchdog: worker:a:0 pid %d on h0 is healthy and has not beaten for half a TTL (key expires in 300ms): %d ", pid, pid)
	if l := w.b.log(); !strings.Contains(l, want) || !strings.Contains(l, "tasks in D: ") {
		t.Fatalf("log %q, want %q", l, want)
	}
	w.b = newBook(at, nil)
	quiet("again within half a TTL", snap("healthy", pid, -2))
	at = at.Add(HBTTL / 2)
	w.watchBeats(snap("healthy", pid, -2), watched)
	if l := w.b.log(); !strings.Contains(l, "(key gone)") {
		t.Fatalf("half a TTL later: log %q", l)
	}

	w.b = newBook(at, nil)
	at = at.Add(HBTTL)
	w.b.crashed("worker:a:0", pid)
	quiet("a fault's target", snap("healthy", pid, -2))
	w.b = newBook(at, nil)
	at = at.Add(HBTTL)
	w.b.windows = []*window{{host: "h1", from: at.Add(-HBTTL / 2), to: at.Add(-HBTTL / 4), why: "partition"}}
	quiet("a host disturbed within a TTL", snap("healthy", pid, -2))
}

// SpreadWorkers makes n files of the worker binary, each its own inode
// with the same bytes, and hands them to hosts in turn.
func TestSpreadWorkers(t *testing.T) {
	bin := t.TempDir() + "/chaosworker"
	if err := os.WriteFile(bin, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	sh := &Shared{WorkerBin: bin}
	if got := sh.workerBin(); got != bin {
		t.Fatalf("unspread: %s", got)
	}
	if err := sh.SpreadWorkers(3); err != nil {
		t.Fatal(err)
	}
	seen := map[string]os.FileInfo{}
	for range 6 {
		b := sh.workerBin()
		fi, err := os.Stat(b)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm()&0o100 == 0 {
			t.Errorf("%s is not executable: %v", b, fi.Mode())
		}
		if got, _ := os.ReadFile(b); string(got) != "#!/bin/sh\nexit 0\n" {
			t.Errorf("%s holds %q", b, got)
		}
		seen[b] = fi
	}
	if len(seen) != 3 {
		t.Fatalf("6 hosts got %d binaries, want 3: %v", len(seen), seen)
	}
	var fis []os.FileInfo
	for _, fi := range seen {
		for _, other := range fis {
			if os.SameFile(fi, other) {
				t.Fatalf("two binaries share a file: %s, %s", fi.Name(), other.Name())
			}
		}
		fis = append(fis, fi)
	}
}

// sleeper starts a sleep process, killed and waited for at the test's end.
func sleeper(t *testing.T) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("sleep", "5")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return cmd
}
