package queue_test

import (
	"io"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/queue"
)

// TestWorkerShutsDownGracefullyAfterItsSupervisorDied: a worker's output
// goes to a pipe its supervisor reads. When the supervisor is SIGKILLed,
// the pipe breaks and the parent-death signal (SIGTERM) arrives: the
// worker must still shut down as on any SIGTERM (docs/design.md §4.1, §4.5) —
// hand back the task it could not finish (aborted:shutdown) and exit 0 —
// not die of SIGPIPE at the first line it logs.
func TestWorkerShutsDownGracefullyAfterItsSupervisorDied(t *testing.T) {
	e := newQEnv(t)
	env := e.workerEnv(0)
	env.ShutdownTimeout = 500 * time.Millisecond
	cmd := exec.Command(testJobWorker)
	cmd.Env = append(os.Environ(),
		health.EnvRedisURL+"="+env.RedisURL, health.EnvPrefix+"="+env.Prefix,
		health.EnvComponent+"="+env.Component.String(), health.EnvQueue+"="+env.Component.Queue,
		health.EnvSlot+"=0", health.EnvHost+"="+env.Host, health.EnvConcurrency+"=1",
		health.EnvHeartbeatInterval+"="+env.HeartbeatInterval.String(), health.EnvHeartbeatTTL+"="+env.HeartbeatTTL.String(),
		health.EnvShutdownTimeout+"="+env.ShutdownTimeout.String(), "TESTJOB_CHECK_INTERVAL=10ms")
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = w, w
	watch := e.watch()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-exited
		}
	}()
	drained := make(chan struct{})
	go func() { // the supervisor reading the worker's output, until it dies
		defer close(drained)
		_, _ = io.Copy(io.Discard, r)
	}()

	id := e.enqueue(e.client(), "hold", "")
	watch.untilJob(id, queue.StateProcessing)
	// The supervisor dies: its end of the pipe closes, SIGTERM follows.
	r.Close()
	<-drained
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if code := cmd.ProcessState.ExitCode(); err != nil || code != 0 {
			st := cmd.ProcessState.Sys().(syscall.WaitStatus)
			t.Fatalf("worker exited with %v (code %d, signal %v), want 0", err, code, st.Signal())
		}
	case <-time.After(waitTimeout):
		t.Fatal("worker did not exit")
	}
	watch.untilJob(id, queue.StateAbortedShutdown)
	info, err := e.insp.GetTaskInfo(e.q, id)
	if err != nil || info.State != asynq.TaskStatePending {
		t.Fatalf("task after the shutdown: %+v %v, want pending", info, err)
	}
}
