package schedule_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/vigil-dev/vigil/schedule"
)

// asynqVersion is the asynq release whose enqueue a fire mirrors.
const asynqVersion = "v0.26.0"

// The scripts of asynq v0.26.0 that a fire and the scheduler entries
// mirror (internal/rdb/rdb.go): if an upgrade changes one, so must
// schedule/scripts.go and entries.go.
var asynqMirrored = map[string]string{
	"enqueueCmd": `
if redis.call("EXISTS", KEYS[1]) == 1 then
	return 0
end
redis.call("HSET", KEYS[1],
           "msg", ARGV[1],
           "state", "pending",
           "pending_since", ARGV[3])
redis.call("LPUSH", KEYS[2], ARGV[2])
return 1
`,
	"enqueueUniqueCmd": `
local ok = redis.call("SET", KEYS[1], ARGV[1], "NX", "EX", ARGV[2])
if not ok then
  return -1
end
if redis.call("EXISTS", KEYS[2]) == 1 then
  return 0
end
redis.call("HSET", KEYS[2],
           "msg", ARGV[3],
           "state", "pending",
           "pending_since", ARGV[4],
           "unique_key", KEYS[1])
redis.call("LPUSH", KEYS[3], ARGV[1])
return 1
`,
	"writeSchedulerEntriesCmd": `
redis.call("DEL", KEYS[1])
for i = 2, #ARGV do
	redis.call("LPUSH", KEYS[1], ARGV[i])
end
redis.call("EXPIRE", KEYS[1], ARGV[1])
return redis.status_reply("OK")`,
	"recordSchedulerEnqueueEventCmd": `
redis.call("ZREMRANGEBYRANK", KEYS[1], 0, -ARGV[3])
redis.call("ZADD", KEYS[1], ARGV[1], ARGV[2])
return redis.status_reply("OK")`,
}

// TestAsynqScriptsMirrored fails when the module builds with another asynq
// or asynq's enqueue, entry or history scripts changed.
func TestAsynqScriptsMirrored(t *testing.T) {
	mod, err := os.ReadFile("../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^\s*github.com/hibiken/asynq ` + regexp.QuoteMeta(asynqVersion) + `\s*$`).Match(mod) {
		t.Fatalf("go.mod does not require asynq %s: re-check what a fire mirrors (schedule/scripts.go) and update asynqVersion", asynqVersion)
	}
	out, err := exec.Command("go", "env", "GOMODCACHE").Output()
	if err != nil {
		t.Skipf("go env GOMODCACHE: %v", err)
	}
	src, err := os.ReadFile(filepath.Join(strings.TrimSpace(string(out)), "github.com", "hibiken", "asynq@"+asynqVersion, "internal", "rdb", "rdb.go"))
	if err != nil {
		t.Fatalf("asynq %s's source: %v", asynqVersion, err)
	}
	for name, want := range asynqMirrored {
		m := regexp.MustCompile("(?s)var " + name + " = redis\\.NewScript\\(`(.*?)`\\)").FindSubmatch(src)
		if m == nil || string(m[1]) != want {
			t.Errorf("asynq %s's %s is not the script schedule/ mirrors", asynqVersion, name)
		}
	}
}

// TestFirePinned: a tick's task is the task asynq's own client writes for
// the same id and options, byte for byte; asynq's server runs it; asynq's
// Inspector lists the schedules as scheduler entries, with their enqueue
// history.
func TestFirePinned(t *testing.T) {
	start := time.Now().Truncate(time.Second) // asynq's Inspector judges entry expiry on the real clock
	e := newEnvAt(t, start)
	ctx := context.Background()
	rdb := e.redis.Client
	payload := json.RawMessage(`{"report":"daily"}`)
	opts := func(d *schedule.Definition) {
		d.Payload, d.MaxRetry, d.Timeout, d.Retention, d.Unique = payload, new(3), 45*time.Second, 2*time.Hour, time.Hour
	}
	e.create("full", "@every 1s", schedule.CatchUpAll, opts)
	e.create("bare", "@every 1s", schedule.CatchUpAll, func(d *schedule.Definition) { d.Payload = nil })
	a := e.scheduler("a", true)
	e.clock.Advance(time.Second + time.Millisecond)
	a.Step(ctx)
	tick := start.Add(time.Second)

	taskKey := func(id string) string { return "asynq:{" + e.q + "}:t:" + id }
	uniqueKey := "asynq:{" + e.q + "}:unique:report:" + md5hex(payload)
	type written struct {
		hash    map[string]string
		pending []string
		lock    string
	}
	read := func(id string) written {
		return written{rdb.HGetAll(ctx, taskKey(id)).Val(), rdb.LRange(ctx, "asynq:{"+e.q+"}:pending", 0, -1).Val(), rdb.Get(ctx, uniqueKey).Val()}
	}
	remove := func(id string) {
		rdb.Del(ctx, taskKey(id), uniqueKey)
		rdb.LRem(ctx, "asynq:{"+e.q+"}:pending", 0, id)
	}
	client := asynq.NewClientFromRedisClient(rdb)
	for _, c := range []struct {
		name string
		opts []asynq.Option
		task *asynq.Task
	}{
		{"full", []asynq.Option{asynq.MaxRetry(3), asynq.Timeout(45 * time.Second), asynq.Retention(2 * time.Hour), asynq.Unique(time.Hour)},
			asynq.NewTask("report", payload)},
		{"bare", nil, asynq.NewTask("report", nil)},
	} {
		id := schedule.TickIDForTest(c.name, tick)
		ours := read(id)
		// The other task stays pending: compare the lists without it.
		other := schedule.TickIDForTest(map[string]string{"full": "bare", "bare": "full"}[c.name], tick)
		remove(id)
		if _, err := client.Enqueue(asynq.NewTask(c.task.Type(), c.task.Payload()), append(c.opts, asynq.Queue(e.q), asynq.TaskID(id))...); err != nil {
			t.Fatalf("%s: asynq's enqueue: %v", c.name, err)
		}
		theirs := read(id)
		if !bytes.Equal([]byte(ours.hash["msg"]), []byte(theirs.hash["msg"])) {
			t.Errorf("%s: the task message differs from asynq's:\n ours   %q\n theirs %q", c.name, ours.hash["msg"], theirs.hash["msg"])
		}
		if keys(ours.hash) != keys(theirs.hash) || ours.hash["state"] != "pending" || ours.hash["unique_key"] != theirs.hash["unique_key"] {
			t.Errorf("%s: task hash %v, asynq's %v", c.name, ours.hash, theirs.hash)
		}
		if c.name == "full" && ours.lock != theirs.lock {
			t.Errorf("%s: uniqueness lock %q, asynq's %q", c.name, ours.lock, theirs.lock)
		}
		if !slices.Contains(ours.pending, id) || !slices.Equal(without(ours.pending, other), without(theirs.pending, other)) {
			t.Errorf("%s: pending %v, asynq's %v", c.name, ours.pending, theirs.pending)
		}
	}

	// asynq's Inspector and server take it from there.
	id := schedule.TickIDForTest("full", tick)
	info, err := e.insp.GetTaskInfo(e.q, id)
	if err != nil || info.State != asynq.TaskStatePending || info.MaxRetry != 3 || info.Timeout != 45*time.Second ||
		info.Retention != 2*time.Hour || string(info.Payload) != string(payload) || info.Type != "report" {
		t.Fatalf("asynq's view of the tick's task: %+v, %v", info, err)
	}
	entries, err := e.insp.SchedulerEntries()
	if err != nil {
		t.Fatal(err)
	}
	var full *asynq.SchedulerEntry
	for _, en := range entries {
		if en.ID == e.hs.Keys().Prefix+"full" {
			full = en
		}
	}
	if full == nil {
		t.Fatalf("asynq's Inspector lists no entry %sfull: %v", e.hs.Keys().Prefix, entries)
	}
	var optStrings []string
	for _, o := range full.Opts {
		optStrings = append(optStrings, o.String())
	}
	if full.Spec != "@every 1s" || full.Task.Type() != "report" || string(full.Task.Payload()) != string(payload) ||
		!full.Next.Equal(start.Add(2*time.Second)) || !full.Prev.Equal(tick) ||
		strings.Join(optStrings, " ") != `Queue("`+e.q+`") MaxRetry(3) Timeout(45s) Retention(2h0m0s) Unique(1h0m0s)` {
		t.Errorf("entry %+v, options %v", full, optStrings)
	}
	hist, err := e.insp.ListSchedulerEnqueueEvents(full.ID)
	if err != nil || len(hist) != 1 || hist[0].TaskID != id || hist[0].EnqueuedAt.Before(tick) || hist[0].EnqueuedAt.After(tick.Add(time.Second)) {
		t.Errorf("enqueue history %+v, %v", hist, err)
	}

	handled := make(chan string, 4)
	srv := asynq.NewServerFromRedisClient(rdb, asynq.Config{Queues: map[string]int{e.q: 1}, Concurrency: 1,
		TaskCheckInterval: 20 * time.Millisecond, Logger: quiet{}})
	if err := srv.Start(asynq.HandlerFunc(func(ctx context.Context, task *asynq.Task) error {
		tid, _ := asynq.GetTaskID(ctx)
		if tid == id && string(task.Payload()) != string(payload) {
			t.Errorf("handler got payload %q", task.Payload())
		}
		handled <- tid
		return nil
	})); err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	got := map[string]bool{}
	for len(got) < 2 {
		select {
		case tid := <-handled:
			got[tid] = true
		case <-time.After(20 * time.Second):
			t.Fatalf("asynq's server ran %v within 20 s", got)
		}
	}
	if !got[id] || !got[schedule.TickIDForTest("bare", tick)] {
		t.Errorf("asynq ran %v", got)
	}
}

func keys(m map[string]string) string {
	var k []string
	for x := range m {
		k = append(k, x)
	}
	slices.Sort(k)
	return strings.Join(k, ",")
}

func without(l []string, x string) []string {
	return slices.DeleteFunc(slices.Clone(l), func(s string) bool { return s == x })
}

type quiet struct{}

func (quiet) Debug(...any) {}
func (quiet) Info(...any)  {}
func (quiet) Warn(...any)  {}
func (quiet) Error(...any) {}
func (quiet) Fatal(...any) {}
