// Package hostproto is what the fault explorer and its host processes
// (explore/internal/vigilhost) say to each other: the host's configuration
// on the command line, then requests on the host's stdin and replies and
// events on its stdout, one JSON object a line.
package hostproto

import (
	"time"

	"github.com/vigil-dev/vigil/policy"
	"github.com/vigil-dev/vigil/schedule"
)

// Config is one host process's supervisor.
type Config struct {
	Host         string        `json:"host"`
	RedisURL     string        `json:"redis_url"` // this host's proxy, handed to its workers too
	Prefix       string        `json:"prefix"`
	Pools        []Pool        `json:"pools"`
	Lease        time.Duration `json:"lease"`
	StopTimeout  time.Duration `json:"stop_timeout"`
	OpTimeout    time.Duration `json:"op_timeout"`
	Interval     time.Duration `json:"interval"`
	TTL          time.Duration `json:"ttl"`
	StartTimeout time.Duration `json:"start_timeout"`
	Policy       policy.Config `json:"policy"`
	// Schedules are the host's configured periodic tasks: it applies them
	// at start, as vigil serve does, and fires them while it leads.
	Schedules []schedule.Definition `json:"schedules,omitempty"`
}

// Pool is one pool of the host.
type Pool struct {
	Queue       string            `json:"queue"`
	Workers     int               `json:"workers"`
	Command     []string          `json:"command"`
	Concurrency int               `json:"concurrency"`
	TaskTimeout time.Duration     `json:"task_timeout"`
	Env         map[string]string `json:"env"`
}

// Operations of a Request.
const (
	OpRestart  = "restart"  // Supervisor.Restart(Component)
	OpStop     = "stop"     // Supervisor.StopComponent(Component)
	OpReset    = "reset"    // Supervisor.Reset(Component, Restart)
	OpRolling  = "rolling"  // Supervisor.RollingRestart(Queue)
	OpShutdown = "shutdown" // Supervisor.Stop, then the leak check; the process exits
)

// Request asks the host for one operation.
type Request struct {
	ID        int           `json:"id"`
	Op        string        `json:"op"`
	Component string        `json:"component,omitempty"`
	Queue     string        `json:"queue,omitempty"`
	Restart   bool          `json:"restart,omitempty"`
	Timeout   time.Duration `json:"timeout"` // the call's context
}

// Events a host prints.
const (
	EvStarted = "started" // Start returned nil
	EvFailed  = "failed"  // Start failed: the process exits 1
	EvReply   = "reply"   // the answer to a Request
	EvStopped = "stopped" // Stop returned: the process exits after this line
	EvLag     = "lag"     // the host's own ticker woke Took late: it was starved of CPU
)

// Message is one line of the host's stdout.
type Message struct {
	Ev       string        `json:"ev"`
	ID       int           `json:"id,omitempty"`
	Err      string        `json:"err,omitempty"`
	Took     time.Duration `json:"took,omitempty"`
	Status   string        `json:"status,omitempty"`   // the component's status in a reply
	Instance string        `json:"instance,omitempty"` // EvStarted
	// EvStopped: goroutines left once Stop returned and the host's Redis
	// client closed (goleak's report, "" for none), and actions that had
	// not answered by then.
	Leaks      string `json:"leaks,omitempty"`
	Unanswered int    `json:"unanswered,omitempty"`
}
