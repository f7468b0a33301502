package schedule

import (
	"cmp"
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/hibiken/asynq"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// A fire writes asynq's keys itself, in the script that records the tick
// (a TaskID conflict alone cannot stop a second enqueue of a tick once a
// completed task without retention is deleted). It writes them exactly as
// asynq v0.26.0's client does (internal/rdb/rdb.go enqueueCmd and
// enqueueUniqueCmd, client.go EnqueueContext), so that asynq's servers,
// Inspector, CLI and asynqmon see a normal pending task; TestFirePinned
// checks that against asynq. The keys below are asynq's
// (internal/base/base.go).

func asynqQueuePrefix(q string) string    { return "asynq:{" + q + "}:" }
func asynqTaskKey(q, id string) string    { return asynqQueuePrefix(q) + "t:" + id }
func asynqPendingKey(q string) string     { return asynqQueuePrefix(q) + "pending" }
func asynqHistoryKey(entry string) string { return "asynq:scheduler_history:" + entry }

// asynqEntriesKey is the list of a scheduler's entries.
func asynqEntriesKey(scheduler string) string { return "asynq:schedulers:{" + scheduler + "}" }

const (
	asynqAllQueues     = "asynq:queues"     // set of the queues asynq knows
	asynqAllSchedulers = "asynq:schedulers" // zset: entries key → expiry (Unix s)
	// asynqHistoryMax is how many enqueue events asynq keeps per entry.
	asynqHistoryMax = 1000
	// asynqDefaultMaxRetry and asynqDefaultTimeout are what asynq's client
	// gives a task with no MaxRetry, no Timeout and no Deadline.
	asynqDefaultMaxRetry = 25
	asynqDefaultTimeout  = 30 * time.Minute
)

// asynqUniqueKey is asynq's uniqueness lock of a task (base.UniqueKey).
func asynqUniqueKey(q, typ string, payload []byte) string {
	if payload == nil {
		return asynqQueuePrefix(q) + "unique:" + typ + ":"
	}
	sum := md5.Sum(payload)
	return asynqQueuePrefix(q) + "unique:" + typ + ":" + hex.EncodeToString(sum[:])
}

// asynq's protobuf messages, from the registry its generated code fills
// (asynq's internal/proto, linked in by importing asynq): encoding through
// asynq's own descriptors keeps the field numbers right.
var (
	taskMessageType  = messageType("asynq.TaskMessage")
	entryMessageType = messageType("asynq.SchedulerEntry")
	eventMessageType = messageType("asynq.SchedulerEnqueueEvent")
	_                = asynq.NewTask // the registration above needs asynq linked in
)

func messageType(name protoreflect.FullName) protoreflect.MessageType {
	mt, err := protoregistry.GlobalTypes.FindMessageByName(name)
	if err != nil {
		panic(fmt.Sprintf("schedule: asynq's %s is not registered: %v", name, err))
	}
	return mt
}

// message builds one of asynq's messages from field values by name (zero
// values are left unset, as proto3 does).
func message(mt protoreflect.MessageType, fields map[string]any) ([]byte, error) {
	m := mt.New()
	fd := mt.Descriptor().Fields()
	for name, v := range fields {
		f := fd.ByName(protoreflect.Name(name))
		if f == nil {
			return nil, fmt.Errorf("asynq's %s has no field %s", mt.Descriptor().FullName(), name)
		}
		switch x := v.(type) {
		case string:
			if x != "" {
				m.Set(f, protoreflect.ValueOfString(x))
			}
		case []byte:
			if len(x) > 0 {
				m.Set(f, protoreflect.ValueOfBytes(x))
			}
		case int32:
			if x != 0 {
				m.Set(f, protoreflect.ValueOfInt32(x))
			}
		case int64:
			if x != 0 {
				m.Set(f, protoreflect.ValueOfInt64(x))
			}
		case []string:
			l := m.Mutable(f).List()
			for _, s := range x {
				l.Append(protoreflect.ValueOfString(s))
			}
		case time.Time:
			if !x.IsZero() {
				m.Set(f, protoreflect.ValueOfMessage(timestamppb.New(x).ProtoReflect()))
			}
		default:
			return nil, fmt.Errorf("field %s: unsupported %T", name, v)
		}
	}
	return proto.Marshal(m.Interface())
}

// task is one task a fire enqueues: asynq's message and its keys.
type task struct {
	id, queue string
	msg       []byte
	uniqueKey string
	uniqueTTL int // seconds
}

// newTask encodes the task of d with id as asynq's client would, given the
// queue's default timeout (0: asynq's).
func newTask(d Definition, id string, defaultTimeout time.Duration) (task, error) {
	retry := int32(asynqDefaultMaxRetry)
	if d.MaxRetry != nil {
		retry = int32(*d.MaxRetry)
	}
	timeout := d.Timeout
	if timeout == 0 {
		timeout = defaultTimeout
	}
	if timeout == 0 {
		timeout = asynqDefaultTimeout
	}
	payload := []byte(d.Payload)
	if len(payload) == 0 {
		payload = nil
	}
	t := task{id: id, queue: d.Queue}
	if d.Unique > 0 {
		t.uniqueKey, t.uniqueTTL = asynqUniqueKey(d.Queue, d.Type, payload), int(d.Unique.Seconds())
	}
	msg, err := message(taskMessageType, map[string]any{
		"id": id, "type": d.Type, "payload": payload, "queue": d.Queue, "retry": retry,
		"timeout": int64(timeout.Seconds()), "unique_key": t.uniqueKey, "retention": int64(d.Retention.Seconds()),
	})
	if err != nil {
		return task{}, fmt.Errorf("encode the task of schedule %s: %w", d.Name, err)
	}
	t.msg = msg
	return t, nil
}

// options are the asynq options of d's tasks as asynq's scheduler writes
// them in an entry (each Option's String()).
func options(d Definition, defaultTimeout time.Duration) []string {
	out := []string{asynq.Queue(d.Queue).String()}
	if d.MaxRetry != nil {
		out = append(out, asynq.MaxRetry(*d.MaxRetry).String())
	}
	if t := cmp.Or(d.Timeout, defaultTimeout); t > 0 {
		out = append(out, asynq.Timeout(t).String())
	}
	if d.Retention > 0 {
		out = append(out, asynq.Retention(d.Retention).String())
	}
	if d.Unique > 0 {
		out = append(out, asynq.Unique(d.Unique).String())
	}
	return out
}

// entryID is the id under which asynq's Inspector lists schedule name.
func entryID(prefix, name string) string { return prefix + name }

// schedulerID is the asynq scheduler id the leader writes the entries
// under: one per Vigil cluster (its key prefix), whichever host leads.
func schedulerID(prefix string) string { return prefix + "scheduler" }
