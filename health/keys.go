package health

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// PrefixDefault is the default key prefix.
const PrefixDefault = "vigil:"

// namePattern is what queue names and host ids must match (docs/design.md §2).
var namePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)

// ErrInvalidName is returned for a queue name, host id or component id that
// does not follow docs/design.md §2.
var ErrInvalidName = errors.New("invalid name")

// ValidName reports whether s may be a queue name or a host id.
func ValidName(s string) bool { return namePattern.MatchString(s) }

// CheckName returns an error naming what is wrong with a queue or host name.
func CheckName(kind, s string) error {
	if !ValidName(s) {
		return fmt.Errorf("%w: %s %q must match %s", ErrInvalidName, kind, truncate(s, 80), namePattern)
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// ComponentID names one supervised worker: worker:<queue>:<slot>.
type ComponentID struct {
	Queue string
	Slot  int
}

// String returns "worker:<queue>:<slot>".
func (c ComponentID) String() string { return "worker:" + c.Queue + ":" + strconv.Itoa(c.Slot) }

// Topic returns the component's event topic, worker:<queue>:<slot>:status.
func (c ComponentID) Topic() string { return c.String() + ":status" }

// MaxSlot bounds slot numbers accepted from outside.
const MaxSlot = 1_000_000

// ParseComponentID parses and validates "worker:<queue>:<slot>". Nothing
// that fails here can ever reach a Redis key.
func ParseComponentID(s string) (ComponentID, error) {
	rest, ok := strings.CutPrefix(s, "worker:")
	q, slot, ok2 := strings.Cut(rest, ":")
	if !ok || !ok2 {
		return ComponentID{}, fmt.Errorf("%w: component id %q must be worker:<queue>:<slot>", ErrInvalidName, truncate(s, 80))
	}
	if err := CheckName("queue", q); err != nil {
		return ComponentID{}, err
	}
	n, err := strconv.Atoi(slot)
	if err != nil || n < 0 || n >= MaxSlot || strconv.Itoa(n) != slot {
		return ComponentID{}, fmt.Errorf("%w: component slot %q must be a number from 0 to %d", ErrInvalidName, truncate(slot, 20), MaxSlot-1)
	}
	return ComponentID{Queue: q, Slot: n}, nil
}

// Keys builds every Redis key Vigil uses (docs/design.md §3). Braces are Redis
// Cluster hash tags: all keys of one component share a slot.
type Keys struct{ Prefix string }

// NewKeys returns the key builder for prefix ("" means PrefixDefault).
func NewKeys(prefix string) Keys {
	if prefix == "" {
		prefix = PrefixDefault
	}
	return Keys{Prefix: prefix}
}

func (k Keys) tagged(kind string, c ComponentID) string {
	return k.Prefix + kind + ":{" + c.String() + "}"
}

// Heartbeat is the worker's heartbeat key, a string with a TTL.
func (k Keys) Heartbeat(c ComponentID) string { return k.tagged("hb", c) }

// Component is the component's record hash.
func (k Keys) Component(c ComponentID) string { return k.tagged("component", c) }

// Running is the hash task id → start ms of the tasks the worker runs now.
func (k Keys) Running(c ComponentID) string { return k.tagged("running", c) }

// Restarts is the restart-history hash.
func (k Keys) Restarts(c ComponentID) string { return k.tagged("restarts", c) }

// Crashes is the sorted set of recent counted crash times.
func (k Keys) Crashes(c ComponentID) string { return k.tagged("restarts", c) + ":crashes" }

// WorkerStats is the hash of counters a worker process reports about
// itself (heartbeats, jobs, …; package queue writes and reads it), for the
// metrics of the host that holds the component.
func (k Keys) WorkerStats(c ComponentID) string { return k.tagged("wstats", c) }

// WorkerPause is set while component c's worker is paused by an operator
// (it takes no task): "<unix ms>\t<by>\t<reason>". It outlives the
// worker's process and its supervisor.
func (k Keys) WorkerPause(c ComponentID) string { return k.tagged("wpause", c) }

// Slot is the slot lease of the component.
func (k Keys) Slot(c ComponentID) string { return k.tagged("slot", c) }

// Free is the set of component ids whose slot lease was seen free: a hint
// for the claim step (docs/design.md §11), which only the lease decides.
func (k Keys) Free() string { return k.Prefix + "free" }

// Components is the set of every known component id.
func (k Keys) Components() string { return k.Prefix + "components" }

// Control is the cluster control hash (pause flags, pool sizes).
func (k Keys) Control() string { return k.Prefix + "control" }

// Host is a host's record.
func (k Keys) Host(h string) string { return k.Prefix + "host:{" + h + "}" }

// Hosts is the sorted set host → last seen ms.
func (k Keys) Hosts() string { return k.Prefix + "hosts" }

// Leader is the leader lease.
func (k Keys) Leader() string { return k.Prefix + "leader" }

// Events is the event stream.
func (k Keys) Events() string { return k.Prefix + "events" }

// Health is the last system health announced on the event stream (status
// and reasons), so that admin servers announce each change once between
// them.
func (k Keys) Health() string { return k.Prefix + "health" }

// JobCrashes counts the workers that died running task t of queue q. It
// shares the slot of asynq's keys for q.
func (k Keys) JobCrashes(q, t string) string { return k.JobPrefix(q) + t + JobCrashesSuffix }

// JobSoloCrashes counts, of task t's crashes, those of a worker that ran
// no other handler at the time: the crashes that can only be t's.
func (k Keys) JobSoloCrashes(q, t string) string { return k.JobPrefix(q) + t + JobSoloCrashesSuffix }

// JobProgress holds the last progress (percent) reported by task t of q.
func (k Keys) JobProgress(q, t string) string { return k.JobPrefix(q) + t + JobProgressSuffix }

// JobStage holds the last stage (milestone) reported by task t of q.
func (k Keys) JobStage(q, t string) string { return k.JobPrefix(q) + t + JobStageSuffix }

// JobScratch names the scratch directory task t of q kept on its worker's
// host after a failure: "<bytes> <path>".
func (k Keys) JobScratch(q, t string) string { return k.JobPrefix(q) + t + JobScratchSuffix }

// JobPrefix is what every per-task key of queue q starts with: a key is
// JobPrefix(q) + task id + suffix. Scripts that find task ids inside Redis
// build the keys from these parts.
func (k Keys) JobPrefix(q string) string { return k.Prefix + "job:{" + q + "}:" }

// Suffixes of the per-task keys (see JobPrefix).
const (
	JobCrashesSuffix     = ":crashes"
	JobSoloCrashesSuffix = ":crashes:solo"
	JobProgressSuffix    = ":progress"
	JobStageSuffix       = ":stage"
	JobScratchSuffix     = ":scratch"
)

// Pause is the hash of what Vigil knows about queue q's pause (who, when,
// why, and whether the global pause or the queue's own pause set it). The
// pause itself is asynq's key asynq:{q}:paused, in the same slot.
func (k Keys) Pause(q string) string { return k.Prefix + "pause:{" + q + "}" }

// QueueStats is the hash of a queue's rolling job statistics (avg_ms).
func (k Keys) QueueStats(q string) string { return k.Prefix + "qstats:{" + q + "}" }

// Durable is a small string in queue q's slot (as asynq's keys) that a
// durable enqueue writes after the task, on the connection that then
// WAITs for the replicas (queue's durable_enqueue).
func (k Keys) Durable(q string) string { return k.Prefix + "durable:{" + q + "}" }

// DeadOwners is the sorted set of queue q's dead worker processes (their
// tasks' owner field, "<component>:<pid>") → when their tasks were
// requeued (ms). A dequeue takes no task for one of them: a command a
// process sent just before it died can reach Redis after that requeue.
// It shares the slot of asynq's keys for q.
func (k Keys) DeadOwners(q string) string { return k.Prefix + "deadowners:{" + q + "}" }

// Schedules is the index of periodic-task schedules (package schedule):
// name → queue, plus the fields ScheduleRevField (bumped by every change,
// so that the leader reloads) and ScheduleConfigField (the digest of the
// last schedules applied from a configuration).
func (k Keys) Schedules() string { return k.Prefix + "schedules" }

// Fields of Schedules that are no schedule name (a name never starts with
// '#').
const (
	ScheduleRevField    = "#rev"
	ScheduleConfigField = "#config"
)

// Schedule is schedule name's record: its definition and its fire state
// (the last tick decided, the last tasks). It shares the slot of asynq's
// keys for its queue q, so that a fire enqueues the task and records the
// tick in one script.
func (k Keys) Schedule(q, name string) string { return k.Prefix + "schedule:{" + q + "}:" + name }

// ScheduleTaken is schedule name's record in queue q just taken (deleted,
// or moved to another queue), kept a minute with the taking operation's
// token: that operation, sent again by go-redis after its reply was lost,
// finds what it took (schedule.takeScript).
func (k Keys) ScheduleTaken(q, name string) string {
	return k.Prefix + "schedule-taken:{" + q + "}:" + name
}

// Commands is the list through which other hosts' admin servers ask host h
// to act on a component it holds.
func (k Keys) Commands(h string) string { return k.Prefix + "cmd:{" + h + "}" }

// Reply is where the answer to command id is pushed.
func (k Keys) Reply(id string) string { return k.Prefix + "reply:" + id }

// Session is a dashboard session, by the random nonce its cookie holds: it
// exists while the session is valid (DELETE /api/v1/session removes it).
func (k Keys) Session(nonce string) string { return k.Prefix + "session:" + nonce }

// Schema is the key-layout version.
func (k Keys) Schema() string { return k.Prefix + "schema" }

// SortIDs sorts ids by queue, then slot.
func SortIDs(ids []ComponentID) {
	slices.SortFunc(ids, func(a, b ComponentID) int {
		if c := strings.Compare(a.Queue, b.Queue); c != 0 {
			return c
		}
		return a.Slot - b.Slot
	})
}
