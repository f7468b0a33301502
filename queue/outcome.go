package queue

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/vigil-dev/vigil/health"
)

// outcome sends one of asynq's outcome writes (done, complete, retry,
// archive, requeue) once. If Redis acknowledges it, or answers that the
// task is not where asynq thought (its own error, passed on), the task is
// not held any more. If no reply came, or Redis refused the write, the call
// is kept (kept.go) and asynq is told it succeeded: asynq's own retry of it
// could never succeed (it reuses a cancelled context), and the task, still
// active under this process, would run again after asynq's lease
// recovery. A kept outcome is written under the owner guard once Redis
// takes writes again.
func (h *redisHook) outcome(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
	c, ok := cmd.(*redis.Cmd)
	if !ok {
		return next(ctx, cmd)
	}
	args := cmd.Args()
	script := outcomeScripts[scriptSHA(cmd.Name(), args)]
	n := args[2].(int) // recognize checked it
	id, _ := args[3+n].(string)
	toxic := h.takeToxic(id)
	if script.name == "requeue" && h.handBack != nil && !h.handBack(id) {
		// Its handler is still inside: not handed back (handback.go). The
		// task stays active and held under this process; the supervisor
		// requeues it once the process is gone.
		h.log.Warn("task not handed back at shutdown: its handler did not return; requeued by the supervisor once this process exits",
			"task", id, "waited", handBackGrace)
		c.SetErr(nil)
		c.SetVal("OK")
		return nil
	}
	if (script.name == "retry" || script.name == "archive") && h.stuck != nil && h.stuck(id) {
		// Its handler is still inside (stuckGrace): a retry would run
		// the task in a second handler. It stays active and held under
		// this process, which exits; the supervisor requeues it then.
		h.log.Warn("task's "+script.name+" not written: its handler is stuck inside it; requeued by the supervisor once this process exits",
			"task", id)
		c.SetErr(nil)
		c.SetVal("OK")
		return nil
	}
	keys := make([]string, n, n+2)
	for i, k := range args[3 : 3+n] {
		keys[i], _ = k.(string)
	}
	argv := args[3+n:]
	sent := c
	if toxic && script.name == "archive" {
		// The toxic verdict's archive deletes the crash counters with it
		// (toxicArchive), sent with EVAL: it is rare, and a NOSCRIPT
		// would send asynq's own script again, without the delete.
		script = toxicArchive
		keys = append(keys, h.jobPfx+id+health.JobCrashesSuffix, h.jobPfx+id+health.JobSoloCrashesSuffix)
		eargs := make([]any, 0, 3+len(keys)+len(argv))
		eargs = append(eargs, "eval", script.src, len(keys))
		for _, k := range keys {
			eargs = append(eargs, k)
		}
		sent = redis.NewCmd(ctx, append(eargs, argv...)...)
	}
	start := h.clock.Now()
	err := next(ctx, health.NoRetry{Cmd: sent})
	if sent != c {
		c.SetVal(sent.Val())
		c.SetErr(sent.Err())
	}
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		return err // go-redis's Script.Run sends it again with EVAL, which comes back here
	}
	h.observe(script.name, start, err)
	switch faultOf(err) {
	case faultNone:
		h.held.resolve(id)
		return err
	}
	h.kept.keep(keptOutcome{id: id, script: script, keys: keys, args: append([]any(nil), argv...), since: h.clock.Now(),
		run: h.held.runOf(id)})
	h.held.resolve(id)
	h.link.poke()
	h.log.Warn("task outcome kept: redis did not take it; written once it does, if the task is still this worker's",
		"task", id, "outcome", script.name, "err", err)
	c.SetErr(nil)
	c.SetVal("OK")
	return nil
}
