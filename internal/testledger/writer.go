package testledger

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// startScript records a start and returns the owner it replaced ("" for
// none). KEYS: owners, runs, runners. ARGV: task, pid.
var startScript = redis.NewScript(`
local cur = redis.call("HGET", KEYS[1], ARGV[1])
redis.call("HSET", KEYS[1], ARGV[1], ARGV[2])
redis.call("HINCRBY", KEYS[2], ARGV[1], 1)
local by = redis.call("HGET", KEYS[3], ARGV[1])
if by then by = by .. "," .. ARGV[2] else by = ARGV[2] end
redis.call("HSET", KEYS[3], ARGV[1], by)
if cur and cur ~= ARGV[2] then return cur end
return ""`)

// endScript drops this pid's owner entry and records the outcome; a
// success is counted with who made it and when. KEYS: owners,
// completions, completers, first_done, failures, last_end. ARGV: task,
// pid, outcome, now (Unix ms).
var endScript = redis.NewScript(`
if redis.call("HGET", KEYS[1], ARGV[1]) == ARGV[2] then redis.call("HDEL", KEYS[1], ARGV[1]) end
redis.call("HSET", KEYS[6], ARGV[1], ARGV[3])
if ARGV[3] == "ok" then
	redis.call("HINCRBY", KEYS[2], ARGV[1], 1)
	redis.call("HSETNX", KEYS[4], ARGV[1], ARGV[4])
	local by = redis.call("HGET", KEYS[3], ARGV[1])
	if by then by = by .. "," .. ARGV[2] else by = ARGV[2] end
	redis.call("HSET", KEYS[3], ARGV[1], by)
else
	redis.call("HINCRBY", KEYS[5], ARGV[1], 1)
end
return 1`)

// Writer is a worker process's side of the ledger.
type Writer struct {
	rdb    *redis.Client
	prefix string
	pid    string
}

// NewWriter writes to the ledger at prefix in rdb as process pid.
func NewWriter(rdb *redis.Client, prefix string, pid int) *Writer {
	return &Writer{rdb: rdb, prefix: prefix, pid: strconv.Itoa(pid)}
}

// OpenFromEnv opens the ledger the environment names (EnvURL, EnvPrefix)
// for this process; close the returned client when done.
func OpenFromEnv() (*Writer, *redis.Client, error) {
	opt, err := redis.ParseURL(os.Getenv(EnvURL))
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", EnvURL, err)
	}
	prefix := os.Getenv(EnvPrefix)
	if prefix == "" {
		return nil, nil, fmt.Errorf("%s is not set", EnvPrefix)
	}
	rdb := redis.NewClient(opt)
	return NewWriter(rdb, prefix, os.Getpid()), rdb, nil
}

func (l *Writer) key(name string) string { return l.prefix + name }

// Start records that this process's handler entered task id, and a
// violation if another live process's handler is still inside it.
func (l *Writer) Start(ctx context.Context, id string) error {
	ctx = context.WithoutCancel(ctx)
	prev, err := startScript.Run(ctx, l.rdb, []string{l.key("owners"), l.key("runs"), l.key("runners")}, id, l.pid).Text()
	if err != nil {
		return fmt.Errorf("ledger start %s: %w", id, err)
	}
	if prev == "" {
		return nil
	}
	if pid, _ := strconv.Atoi(prev); livePeer(pid, l.prefix) {
		msg := fmt.Sprintf("%s started in %s while %s runs it", id, l.pid, prev)
		return l.rdb.RPush(ctx, l.key("violations"), msg).Err()
	}
	return nil
}

// End records that the handler left task id with outcome (OutcomeOK
// completes it).
func (l *Writer) End(ctx context.Context, id, outcome string) error {
	keys := []string{l.key("owners"), l.key("completions"), l.key("completers"), l.key("first_done"),
		l.key("failures"), l.key("last_end")}
	if err := endScript.Run(context.WithoutCancel(ctx), l.rdb, keys, id, l.pid, outcome, time.Now().UnixMilli()).Err(); err != nil {
		return fmt.Errorf("ledger end %s: %w", id, err)
	}
	return nil
}

// Hello records which component and host this process works for (from
// its VIGIL_COMPONENT and VIGIL_HOST), as "<component> <host>".
func (l *Writer) Hello(ctx context.Context, component, host string) error {
	return l.rdb.HSet(context.WithoutCancel(ctx), l.key("procs"), l.pid, component+" "+host).Err()
}

// Exit records how this process is leaving on its own terms.
func (l *Writer) Exit(ctx context.Context, how string) error {
	return l.rdb.HSet(context.WithoutCancel(ctx), l.key("exits"), l.pid, how).Err()
}

// livePeer reports whether pid is a running (not zombie) process writing
// to the same ledger: a recycled pid is not taken for one.
func livePeer(pid int, prefix string) bool {
	if pid <= 0 {
		return false
	}
	dir := "/proc/" + strconv.Itoa(pid)
	stat, err := os.ReadFile(dir + "/stat")
	if err != nil {
		return false
	}
	if i := bytes.LastIndexByte(stat, ')'); i > 0 && i+2 < len(stat) && stat[i+2] == 'Z' {
		return false
	}
	env, err := os.ReadFile(dir + "/environ")
	if err != nil {
		return false
	}
	return bytes.Contains(append(env, 0), []byte(EnvPrefix+"="+prefix+"\x00"))
}
