package queue

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/internal/clock"
)

// FieldWorkerEnabled is the global pause flag of the control hash
// (docs/design.md §3): "false" while Vigil's global pause is on.
const FieldWorkerEnabled = "worker_enabled"

// legacyPausedPrefix is the control-hash field of a queue's own pause as
// Vigil stored it before asynq's key became the one truth: Apply migrates
// it and deletes it.
const legacyPausedPrefix = "paused:"

// fieldPauseLayout marks a control hash whose global flag has been
// migrated to per-queue pause records.
const fieldPauseLayout = "pause_layout"

// ErrUnknownQueue is returned for a queue no pool consumes.
var ErrUnknownQueue = errors.New("unknown queue")

// Pause scopes: what asked for a queue's pause.
const (
	ScopeGlobal = "global" // Vigil's global pause
	ScopeQueue  = "queue"  // the queue's own pause in Vigil
)

// Who paused a queue (QueuePause.By).
const (
	PausedByVigil = "vigil"
	PausedByAsynq = "asynq" // asynq's tools (CLI, asynqmon, Inspector.PauseQueue) or anything else
)

// Control pauses and resumes queues and reads their statistics.
//
// asynq's own key asynq:{q}:paused is the one truth for whether q is
// paused (docs/design.md §6): asynq's workers, CLI and asynqmon read and write
// it too. Vigil keeps beside it, in the same slot (health.Keys.Pause), who
// paused the queue, when and why, and which of its scopes (global, queue)
// hold it. That record counts only while the paused key still holds the
// value Vigil wrote: a pause lifted (or re-made) by asynq's tools makes it
// stale, and the next script that looks deletes it. Nothing but a resume
// ever lifts a pause: not a restart, not a host starting.
type Control struct {
	rdb   redis.UniversalClient
	keys  health.Keys
	store *health.Store
	insp  *asynq.Inspector
	clock clock.Clock
}

// NewControl returns the control of the queues kept in store's Redis.
func NewControl(store *health.Store) *Control {
	return &Control{rdb: store.Client(), keys: store.Keys(), store: store,
		insp: asynq.NewInspectorFromRedisClient(store.Client()), clock: clock.Real{}}
}

// WithClock makes c read time from cl (tests); it returns c.
func (c *Control) WithClock(cl clock.Clock) *Control { c.clock = cl; return c }

// QueuePause is one queue's pause as read from Redis.
type QueuePause struct {
	Paused bool
	// By is PausedByVigil or PausedByAsynq while paused, else "".
	By string
	// Scopes are Vigil's scopes holding the pause (ScopeGlobal, ScopeQueue).
	Scopes []string
	// Who and Why are what the pausing request said (Vigil pauses only).
	Who, Why string
	// Since is when the queue was paused (asynq stores seconds); zero if
	// unknown.
	Since time.Time
}

// Has reports whether scope holds the pause.
func (p QueuePause) Has(scope string) bool {
	for _, s := range p.Scopes {
		if s == scope {
			return true
		}
	}
	return false
}

// PauseState is the pause of each queue read, and Vigil's global pause.
type PauseState struct {
	// Global is on while Vigil's global pause holds at least one queue.
	Global bool
	Queues map[string]QueuePause
}

// Paused reports whether q is paused (asynq's key).
func (s PauseState) Paused(q string) bool { return s.Queues[q].Paused }

// Actor says who asks for a pause or resume, and why.
type Actor struct {
	Who, Why string
}

// State reads the pause of queues.
func (c *Control) State(ctx context.Context, queues []string) (PauseState, error) {
	pipe := c.rdb.Pipeline()
	flag := pipe.HGet(ctx, c.keys.Control(), FieldWorkerEnabled)
	vals := make([]*redis.StringCmd, len(queues))
	metas := make([]*redis.MapStringStringCmd, len(queues))
	for i, q := range queues {
		vals[i] = pipe.Get(ctx, asynqPausedKey(q))
		metas[i] = pipe.HGetAll(ctx, c.keys.Pause(q))
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return PauseState{}, fmt.Errorf("read pause state: %w", err)
	}
	st := PauseState{Queues: make(map[string]QueuePause, len(queues))}
	for i, q := range queues {
		p := readPause(vals[i], metas[i].Val())
		st.Queues[q] = p
		if flag.Val() == "false" && p.Has(ScopeGlobal) {
			st.Global = true
		}
	}
	return st, nil
}

// readPause interprets asynq's paused key (its value: the pause time in
// Unix seconds) and Vigil's record beside it.
func readPause(val *redis.StringCmd, meta map[string]string) QueuePause {
	cur, err := val.Result()
	if err != nil { // redis.Nil: not paused (a stale record is ignored)
		return QueuePause{}
	}
	p := QueuePause{Paused: true, By: PausedByAsynq}
	if sec, err := strconv.ParseInt(cur, 10, 64); err == nil {
		p.Since = time.Unix(sec, 0)
	}
	if meta["token"] != cur {
		return p // asynq's tools paused it (or re-paused it after lifting ours)
	}
	for _, s := range []string{ScopeGlobal, ScopeQueue} {
		if meta[s] == "1" {
			p.Scopes = append(p.Scopes, s)
		}
	}
	if len(p.Scopes) == 0 {
		return p
	}
	p.By, p.Who, p.Why = PausedByVigil, meta["who"], meta["why"]
	if ms, err := strconv.ParseInt(meta["at"], 10, 64); err == nil {
		p.Since = time.UnixMilli(ms)
	}
	return p
}

// Outcomes of one queue's pause or resume (the scripts' answers).
const (
	// pause
	OutPaused      = "paused"       // it was running; now paused
	OutScopeAdded  = "scope_added"  // already paused by Vigil's other scope; this one holds it too
	OutAlready     = "already"      // this scope already held it
	OutAsynqPaused = "asynq_paused" // paused by asynq's tools: left as it is
	// resume
	OutResumed      = "resumed"       // the pause is lifted
	OutScopeRemoved = "scope_removed" // this scope let go; the other one still holds it
	OutOtherScope   = "other_scope"   // paused by Vigil's other scope, not this one: still paused
	OutAsynqResumed = "asynq_resumed" // a pause made by asynq's tools, lifted by a queue resume
	OutAsynqKept    = "asynq_kept"    // a pause made by asynq's tools, left by the global resume
	OutNotPaused    = "not_paused"    // it was running
	OutStale        = "stale"         // Vigil had paused it, but asynq's tools had already resumed it
)

// Changed reports whether an outcome changed anything.
func Changed(out string) bool {
	switch out {
	case OutPaused, OutScopeAdded, OutResumed, OutScopeRemoved, OutAsynqResumed:
		return true
	}
	return false
}

// pauseScript: KEYS asynq's paused key, Vigil's pause record. ARGV scope,
// who, at (ms), why, token (the value to write: Unix seconds, as asynq),
// "adopt" to take over a pause Vigil made before it kept records.
var pauseScript = redis.NewScript(`
local cur = redis.call("GET", KEYS[1])
local tok = redis.call("HGET", KEYS[2], "token")
local ours = cur and tok and cur == tok
if tok and not ours then redis.call("DEL", KEYS[2]) end
if cur and not ours then
	if ARGV[6] ~= "adopt" then return "asynq_paused" end
	redis.call("HSET", KEYS[2], ARGV[1], "1", "token", cur, "who", ARGV[2], "at", ARGV[3], "why", ARGV[4])
	return "scope_added"
end
if ours and redis.call("HGET", KEYS[2], ARGV[1]) == "1" then return "already" end
redis.call("HSET", KEYS[2], ARGV[1], "1")
if ours then return "scope_added" end
redis.call("SET", KEYS[1], ARGV[5])
redis.call("HSET", KEYS[2], "token", ARGV[5], "who", ARGV[2], "at", ARGV[3], "why", ARGV[4])
return "paused"`)

// resumeScript: KEYS as pauseScript. ARGV scope.
var resumeScript = redis.NewScript(`
local cur = redis.call("GET", KEYS[1])
local tok = redis.call("HGET", KEYS[2], "token")
local ours = cur and tok and cur == tok
if tok and not ours then
	redis.call("DEL", KEYS[2])
	if not cur then return "stale" end
end
if not cur then return "not_paused" end
if not ours then
	if ARGV[1] == "queue" then
		redis.call("DEL", KEYS[1])
		return "asynq_resumed"
	end
	return "asynq_kept"
end
if redis.call("HGET", KEYS[2], ARGV[1]) ~= "1" then return "other_scope" end
redis.call("HDEL", KEYS[2], ARGV[1])
if redis.call("HGET", KEYS[2], "global") == "1" or redis.call("HGET", KEYS[2], "queue") == "1" then
	return "scope_removed"
end
redis.call("DEL", KEYS[1], KEYS[2])
return "resumed"`)

func (c *Control) pauseOne(ctx context.Context, q, scope string, a Actor) (string, error) {
	return c.pauseRun(ctx, q, scope, a, "")
}

func (c *Control) pauseRun(ctx context.Context, q, scope string, a Actor, adopt string) (string, error) {
	now := c.clock.Now()
	out, err := pauseScript.Run(ctx, c.rdb, []string{asynqPausedKey(q), c.keys.Pause(q)},
		scope, a.Who, now.UnixMilli(), a.Why, now.Unix(), adopt).Text()
	if err != nil {
		return "", fmt.Errorf("pause queue %s: %w", q, err)
	}
	return out, nil
}

func (c *Control) resumeOne(ctx context.Context, q, scope string) (string, error) {
	out, err := resumeScript.Run(ctx, c.rdb, []string{asynqPausedKey(q), c.keys.Pause(q)}, scope).Text()
	if err != nil {
		return "", fmt.Errorf("resume queue %s: %w", q, err)
	}
	return out, nil
}

// PauseQueue pauses q on its own; out says what happened (Out...).
func (c *Control) PauseQueue(ctx context.Context, q string, a Actor) (out string, err error) {
	if err := health.CheckName("queue", q); err != nil {
		return "", err
	}
	return c.pauseOne(ctx, q, ScopeQueue, a)
}

// ResumeQueue lifts q's own pause, or a pause made by asynq's tools; a
// queue the global pause holds stays paused.
func (c *Control) ResumeQueue(ctx context.Context, q string) (out string, err error) {
	if err := health.CheckName("queue", q); err != nil {
		return "", err
	}
	return c.resumeOne(ctx, q, ScopeQueue)
}

// PauseAll sets the global pause: every queue is paused in asynq. outs has
// each queue's outcome.
func (c *Control) PauseAll(ctx context.Context, queues []string, a Actor) (outs map[string]string, flagChanged bool, err error) {
	old, err := c.rdb.HGet(ctx, c.keys.Control(), FieldWorkerEnabled).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, false, fmt.Errorf("read the global pause: %w", err)
	}
	if err := c.rdb.HSet(ctx, c.keys.Control(), FieldWorkerEnabled, "false", fieldPauseLayout, "2").Err(); err != nil {
		return nil, false, fmt.Errorf("write the global pause: %w", err)
	}
	outs = map[string]string{}
	for _, q := range queues {
		if outs[q], err = c.pauseOne(ctx, q, ScopeGlobal, a); err != nil {
			return outs, old != "false", err
		}
	}
	return outs, old != "false", nil
}

// ResumeAll lifts the global pause: queues paused on their own, or by
// asynq's tools, stay paused.
func (c *Control) ResumeAll(ctx context.Context, queues []string) (outs map[string]string, flagChanged bool, err error) {
	old, err := c.rdb.HGet(ctx, c.keys.Control(), FieldWorkerEnabled).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, false, fmt.Errorf("read the global pause: %w", err)
	}
	outs = map[string]string{}
	for _, q := range queues {
		if outs[q], err = c.resumeOne(ctx, q, ScopeGlobal); err != nil {
			return outs, false, err
		}
	}
	if err := c.rdb.HSet(ctx, c.keys.Control(), FieldWorkerEnabled, "true").Err(); err != nil {
		return outs, false, fmt.Errorf("write the global pause: %w", err)
	}
	return outs, old == "false", nil
}

// Apply runs at start-up. It never lifts a pause: asynq's key is the
// truth, whatever Vigil's records say. It only migrates the pause flags
// of Vigil releases that kept them in the control hash (paused:<q>, and a
// global flag with no per-queue records) into records beside asynq's key,
// so that a resume in Vigil still lifts them.
func (c *Control) Apply(ctx context.Context, queues []string) error {
	h, err := c.rdb.HGetAll(ctx, c.keys.Control()).Result()
	if err != nil {
		return fmt.Errorf("read the control hash: %w", err)
	}
	a := Actor{Who: "vigil (migrated pause flag)"}
	for k, v := range h {
		q, ok := strings.CutPrefix(k, legacyPausedPrefix)
		if !ok || health.CheckName("queue", q) != nil {
			continue
		}
		if v == "true" {
			if _, err := c.pauseRun(ctx, q, ScopeQueue, a, "adopt"); err != nil {
				return err
			}
		}
		if err := c.rdb.HDel(ctx, c.keys.Control(), k).Err(); err != nil {
			return fmt.Errorf("migrate pause flag %s: %w", k, err)
		}
	}
	if h[FieldWorkerEnabled] == "false" && h[fieldPauseLayout] == "" {
		for _, q := range queues {
			if _, err := c.pauseRun(ctx, q, ScopeGlobal, a, "adopt"); err != nil {
				return err
			}
		}
	}
	if h[fieldPauseLayout] == "" {
		if err := c.rdb.HSet(ctx, c.keys.Control(), fieldPauseLayout, "2").Err(); err != nil {
			return fmt.Errorf("mark the pause layout: %w", err)
		}
	}
	return nil
}
