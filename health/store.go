package health

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrNotFound is returned for a component with no record.
var ErrNotFound = errors.New("not found")

// ErrNotOwner is returned for a write by a supervisor that does not own the
// component's slot (see Write.Owner).
var ErrNotOwner = errors.New("not the owner of the slot")

// ErrPIDTaken is returned by SetPID when the record already names another
// process.
var ErrPIDTaken = errors.New("the record names another process")

// OwnerError says who holds the slot a refused write was for.
type OwnerError struct {
	Component ComponentID
	Writer    string // the writer's lease value
	Holder    string // the lease's value, or the record's host/instance when the lease is gone
}

func (e *OwnerError) Error() string {
	return fmt.Sprintf("%s: %s may not write its record: the slot is %s's", e.Component, e.Writer, e.Holder)
}

// Unwrap makes errors.Is(err, ErrNotOwner) hold.
func (e *OwnerError) Unwrap() error { return ErrNotOwner }

// Store reads and writes the health state of docs/design.md §3.
type Store struct {
	rdb       redis.UniversalClient
	keys      Keys
	maxEvents int64
}

// NewStore returns a store on rdb under prefix ("" = default). maxEvents
// bounds the event stream (0 = MaxEventsDefault).
func NewStore(rdb redis.UniversalClient, prefix string, maxEvents int64) *Store {
	if maxEvents <= 0 {
		maxEvents = MaxEventsDefault
	}
	return &Store{rdb: rdb, keys: NewKeys(prefix), maxEvents: maxEvents}
}

// Keys returns the store's key builder.
func (s *Store) Keys() Keys { return s.keys }

// Client returns the Redis client.
func (s *Store) Client() redis.UniversalClient { return s.rdb }

// Write describes one change of a component's record.
type Write struct {
	// Actor is who asks; the stored status must be allowed to go to
	// Component.Status by it (docs/design.md §4), unless NoCheck.
	Actor   Actor
	NoCheck bool
	// Owner, if set, is the writer's lease value (LeaseValue(host,
	// instance)): the write is refused with an *OwnerError unless the
	// slot's lease is the writer's, or the lease is gone and the record
	// names no other instance. A supervisor always sets it: only the holder
	// of a slot writes its record (docs/design.md §11).
	Owner string
	// Restarts writes Component.Restarts (history hash and crash window).
	Restarts bool
	// ClearHeartbeat deletes the heartbeat key (a new process starts clean).
	ClearHeartbeat bool
	// Index adds the component to the index set.
	Index bool
	// Event is appended to the event stream in the same round trip; nil
	// means the worker_update event of the new record.
	Event *Event
	// NoEvent writes no event.
	NoEvent bool
}

type writeArgs struct {
	Owner    string            `json:"owner,omitempty"`
	From     []state           `json:"from,omitempty"`
	Set      map[string]string `json:"set"`
	Del      []string          `json:"del,omitempty"`
	Restarts map[string]string `json:"restarts,omitempty"`
	Crashes  [][2]string       `json:"crashes,omitempty"`
	DelHB    bool              `json:"del_hb,omitempty"`
}

// recordFields are the component fields the supervisor owns and writes whole;
// last_heartbeat, current_job and current_seq belong to the worker, rev to
// the scripts.
func recordFields(c Component) (set map[string]string, del []string) {
	set = map[string]string{
		FieldStatus:    string(c.Status),
		FieldReason:    c.Reason,
		FieldHeld:      "0",
		FieldHost:      c.Host,
		FieldInstance:  c.Instance,
		FieldPID:       strconv.Itoa(c.PID),
		FieldQueue:     c.ID.Queue,
		FieldSlot:      strconv.Itoa(c.ID.Slot),
		FieldStartedAt: ms(c.StartedAt),
		FieldSignal:    c.Signal,
		FieldUpdatedAt: ms(c.UpdatedAt),
	}
	if c.Held {
		set[FieldHeld] = "1"
	}
	if c.PID == 0 {
		delete(set, FieldPID)
		del = append(del, FieldPID)
	}
	if c.HasExit {
		set[FieldExitCode] = strconv.Itoa(c.ExitCode)
	} else {
		del = append(del, FieldExitCode)
	}
	// The supervisor never writes a recovering window: its heartbeat does,
	// and any status the supervisor writes ends it.
	del = append(del, FieldRecoveringUntil)
	if c.Status == StatusStarting {
		del = append(del, FieldHealthySince, FieldLastHeartbeat, FieldCurrentJob, FieldCurrentSeq, FieldVersion)
	} else if !c.HealthySince.IsZero() {
		set[FieldHealthySince] = ms(c.HealthySince)
	}
	return set, del
}

// Write stores c (its record, and its restart history if w.Restarts) and then
// the index entry and the event. The record write is atomic and refused with
// an *OwnerError when the writer does not own the slot (w.Owner), with a
// *TransitionError when the status machine forbids it; a refused write
// changes nothing and announces nothing (hence two round trips: the event
// stream and the index are in other slots than the record).
func (s *Store) Write(ctx context.Context, c Component, w Write) (prev Status, err error) {
	set, del := recordFields(c)
	a := writeArgs{Owner: w.Owner, Set: set, Del: del, DelHB: w.ClearHeartbeat}
	if !w.NoCheck {
		a.From = allowedFrom(c.Status, w.Actor)
		if a.From == nil {
			return s.refuse(ctx, c, w.Actor)
		}
	}
	if w.Restarts {
		a.Restarts = restartsHash(c.Restarts)
		for i, t := range c.Restarts.Crashes {
			a.Crashes = append(a.Crashes, [2]string{ms(t), ms(t) + "-" + strconv.Itoa(i)})
		}
	}
	arg, err := json.Marshal(a)
	if err != nil {
		return "", fmt.Errorf("encode write of %s: %w", c.ID, err)
	}
	id := c.ID
	// The record first, alone: a refused write must neither announce nor
	// index anything, and the event and the index live in other slots, so
	// neither the script nor a pipeline could make them conditional.
	out, err := writeScript.Run(ctx, s.rdb, []string{s.keys.Component(id), s.keys.Slot(id), s.keys.Restarts(id), s.keys.Crashes(id), s.keys.Heartbeat(id)}, arg).Slice()
	if err != nil {
		return "", fmt.Errorf("write %s: %w", id, err)
	}
	if len(out) < 2 {
		return "", fmt.Errorf("write %s: unexpected reply %v", id, out)
	}
	tok, _ := out[1].(string)
	if n, _ := out[0].(int64); n == -1 {
		return "", &OwnerError{Component: id, Writer: w.Owner, Holder: tok}
	}
	prev, held := parseState(tok)
	if n, _ := out[0].(int64); n != 1 {
		return prev, &TransitionError{Component: id, From: prev, Held: held, To: c.Status, Actor: w.Actor}
	}
	if !w.Index && w.NoEvent {
		return prev, nil
	}
	// The event shows the record as the write left it: the worker's
	// current job (not the writer's idea of it) and the revision.
	workerFields(&c, out[2:])
	pipe := s.rdb.Pipeline()
	if w.Index {
		pipe.SAdd(ctx, s.keys.Components(), id.String())
	}
	if !w.NoEvent {
		ev := w.Event
		if ev == nil {
			e := WorkerEvent(c, c.UpdatedAt)
			ev = &e
		}
		s.addEvent(ctx, pipe, *ev)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return prev, fmt.Errorf("write %s: record written, event or index not: %w", id, err)
	}
	return prev, nil
}

// workerFields sets c's rev, current_job and current_seq from a write
// script's reply (its elements after the second).
func workerFields(c *Component, f []any) {
	str := func(i int) string {
		if i < len(f) {
			s, _ := f[i].(string)
			return s
		}
		return ""
	}
	c.Rev, _ = strconv.ParseInt(str(0), 10, 64)
	c.CurrentJob = str(1)
	c.CurrentSeq, _ = strconv.ParseInt(str(2), 10, 64)
}

// refuse is Write's answer to a change no stored state allows; it reads the
// stored state only to name it in the error.
func (s *Store) refuse(ctx context.Context, c Component, actor Actor) (Status, error) {
	te := &TransitionError{Component: c.ID, To: c.Status, Actor: actor}
	if v, err := s.rdb.HMGet(ctx, s.keys.Component(c.ID), FieldStatus, FieldHeld).Result(); err == nil && len(v) == 2 {
		st, _ := v[0].(string)
		held, _ := v[1].(string)
		te.From, te.Held = Status(st), st == string(StatusStopped) && held == "1"
	}
	return te.From, te
}

func parseState(tok string) (Status, bool) {
	if state(tok) == heldStopped {
		return StatusStopped, true
	}
	return Status(tok), false
}

// isNoScript reports whether a script call failed for want of the script.
func isNoScript(err error) bool {
	return err != nil && strings.Contains(err.Error(), "NOSCRIPT")
}

// Load prepares the scripts on the server so that pipelined EVALSHA calls
// find them.
func (s *Store) Load(ctx context.Context) error {
	for _, sc := range []*redis.Script{writeScript, heartbeatScript, setPIDScript} {
		if err := sc.Load(ctx, s.rdb).Err(); err != nil {
			return fmt.Errorf("load script: %w", err)
		}
	}
	return nil
}

func (s *Store) addEvent(ctx context.Context, pipe redis.Pipeliner, e Event) {
	data, _ := json.Marshal(e)
	pipe.XAdd(ctx, &redis.XAddArgs{
		Stream: s.keys.Events(),
		MaxLen: s.maxEvents,
		Approx: true,
		Values: []string{EntryTopic, e.Topic, EntryType, e.Type, EntryData, string(data)},
	})
}

// AddEventTo queues the append of e to the event stream on pipe, so that a
// change and its events go in one round trip.
func (s *Store) AddEventTo(ctx context.Context, pipe redis.Pipeliner, e Event) {
	s.addEvent(ctx, pipe, e)
}

// AddEncodedEventTo is AddEventTo for an event already encoded: data is
// json.Marshal's encoding of the Event of that topic and type. also, if
// set, is a second topic the entry is an event of (EntryAlso): one entry
// stands for both.
func (s *Store) AddEncodedEventTo(ctx context.Context, pipe redis.Pipeliner, topic, also, typ, data string) {
	values := []string{EntryTopic, topic, EntryType, typ, EntryData, data}
	if also != "" {
		values = append(values, EntryAlso, also)
	}
	pipe.XAdd(ctx, &redis.XAddArgs{
		Stream: s.keys.Events(),
		MaxLen: s.maxEvents,
		Approx: true,
		Values: values,
	})
}

// AddEvent appends e to the event stream and returns its id.
func (s *Store) AddEvent(ctx context.Context, e Event) (string, error) {
	data, err := json.Marshal(e)
	if err != nil {
		return "", fmt.Errorf("encode event %s: %w", e.Topic, err)
	}
	id, err := s.rdb.XAdd(ctx, &redis.XAddArgs{
		Stream: s.keys.Events(), MaxLen: s.maxEvents, Approx: true,
		Values: []string{EntryTopic, e.Topic, EntryType, e.Type, EntryData, string(data)},
	}).Result()
	if err != nil {
		return "", fmt.Errorf("add event %s: %w", e.Topic, err)
	}
	return id, nil
}

// SetPID records the pid of c's just-spawned process (the record was written
// in starting, without a pid, before the fork) and then appends c's event.
// owner is the writer's lease value ("" for no owner check, see
// Write.Owner). It fails with ErrNotOwner (an *OwnerError) when the slot is
// another's, ErrPIDTaken when the record names another process, and
// ErrNotFound when there is no record (Redis lost its data): in each case
// nothing is written.
func (s *Store) SetPID(ctx context.Context, c Component, owner string) error {
	out, err := setPIDScript.Run(ctx, s.rdb, []string{s.keys.Component(c.ID), s.keys.Slot(c.ID)}, c.PID, owner).Slice()
	if err != nil {
		return fmt.Errorf("record pid of %s: %w", c.ID, err)
	}
	if len(out) < 2 {
		return fmt.Errorf("record pid of %s: unexpected reply %v", c.ID, out)
	}
	n, _ := out[0].(int64)
	v, _ := out[1].(string)
	switch n {
	case 1:
		workerFields(&c, out[2:])
	case -1:
		return &OwnerError{Component: c.ID, Writer: owner, Holder: v}
	case -2:
		return fmt.Errorf("record pid of %s: %w", c.ID, ErrNotFound)
	default:
		return fmt.Errorf("record pid %d of %s: %w (%s)", c.PID, c.ID, ErrPIDTaken, v)
	}
	if _, err := s.AddEvent(ctx, WorkerEvent(c, c.UpdatedAt)); err != nil {
		return fmt.Errorf("record pid of %s: pid written, event not: %w", c.ID, err)
	}
	return nil
}

// Get reads one component, with its restart history.
func (s *Store) Get(ctx context.Context, id ComponentID) (Component, error) {
	cs, err := s.GetMany(ctx, []ComponentID{id})
	if err != nil {
		return Component{}, err
	}
	if cs[0].Status == StatusNone && cs[0].Restarts.LifetimeRestarts == 0 && cs[0].Restarts.FailedAt.IsZero() {
		return Component{}, fmt.Errorf("component %s: %w", id, ErrNotFound)
	}
	return cs[0], nil
}

// GetMany reads several components in one round trip. A component with no
// record comes back with StatusNone.
func (s *Store) GetMany(ctx context.Context, ids []ComponentID) ([]Component, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	pipe := s.rdb.Pipeline()
	type cmds struct {
		rec, rst *redis.MapStringStringCmd
		crashes  *redis.ZSliceCmd
	}
	all := make([]cmds, len(ids))
	for i, id := range ids {
		all[i] = cmds{
			rec:     pipe.HGetAll(ctx, s.keys.Component(id)),
			rst:     pipe.HGetAll(ctx, s.keys.Restarts(id)),
			crashes: pipe.ZRangeWithScores(ctx, s.keys.Crashes(id), 0, -1),
		}
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("read %d components: %w", len(ids), err)
	}
	out := make([]Component, len(ids))
	for i, id := range ids {
		var scores []float64
		for _, z := range all[i].crashes.Val() {
			scores = append(scores, z.Score)
		}
		out[i] = componentFromHash(id, all[i].rec.Val(), all[i].rst.Val(), scores)
	}
	return out, nil
}

// IDs lists the indexed components, sorted by queue then slot.
func (s *Store) IDs(ctx context.Context) ([]ComponentID, error) {
	raw, err := s.rdb.SMembers(ctx, s.keys.Components()).Result()
	if err != nil {
		return nil, fmt.Errorf("list components: %w", err)
	}
	ids := make([]ComponentID, 0, len(raw))
	for _, r := range raw {
		if id, err := ParseComponentID(r); err == nil {
			ids = append(ids, id)
		}
	}
	SortIDs(ids)
	return ids, nil
}

// List reads every indexed component.
func (s *Store) List(ctx context.Context) ([]Component, error) {
	ids, err := s.IDs(ctx)
	if err != nil {
		return nil, err
	}
	return s.GetMany(ctx, ids)
}

// Probe is what a deadline check learns of a component.
type Probe struct {
	// TTL is the heartbeat key's remaining life; <= 0 when the key is gone.
	TTL time.Duration
	// Value is the heartbeat key's value ("" when gone).
	Value string
	// Status, PID, HealthySince and Instance are read from the record
	// (Status is StatusNone when there is no record).
	Status       Status
	PID          int
	HealthySince time.Time
	Instance     string
}

// ProbeMany reads the heartbeat keys and statuses of ids in one round trip.
// Reading an expired key deletes it on the spot, so a gone key is exact.
func (s *Store) ProbeMany(ctx context.Context, ids []ComponentID) ([]Probe, error) {
	pipe := s.rdb.Pipeline()
	ttls := make([]*redis.DurationCmd, len(ids))
	vals := make([]*redis.StringCmd, len(ids))
	recs := make([]*redis.SliceCmd, len(ids))
	for i, id := range ids {
		ttls[i] = pipe.PTTL(ctx, s.keys.Heartbeat(id))
		vals[i] = pipe.Get(ctx, s.keys.Heartbeat(id))
		recs[i] = pipe.HMGet(ctx, s.keys.Component(id), FieldStatus, FieldPID, FieldHealthySince, FieldInstance)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("probe %d heartbeats: %w", len(ids), err)
	}
	out := make([]Probe, len(ids))
	for i := range ids {
		p := Probe{TTL: ttls[i].Val(), Value: vals[i].Val()}
		if p.Value == "" || p.TTL < 0 {
			p.TTL, p.Value = 0, ""
		}
		r := recs[i].Val()
		if len(r) == 4 {
			st, _ := r[0].(string)
			pid, _ := r[1].(string)
			hs, _ := r[2].(string)
			p.Instance, _ = r[3].(string)
			p.Status, p.HealthySince = Status(st), parseMS(hs)
			p.PID, _ = strconv.Atoi(pid)
		}
		out[i] = p
	}
	return out, nil
}

// ValidHeartbeat reports whether a heartbeat value is a Unix ms timestamp.
func ValidHeartbeat(v string) bool {
	n, err := strconv.ParseInt(v, 10, 64)
	return err == nil && n > 0
}

// SetCurrentJobTo queues on pipe a worker's write of its current job (""
// when idle) with the change's number within its process (1, 2, …): one
// HSET, the only record write that leaves rev alone. The job event the
// change rides with says the same (queue.JobEvent's worker_job and
// worker_seq), and the event broker turns that into the worker's
// worker_update.
func (s *Store) SetCurrentJobTo(ctx context.Context, pipe redis.Pipeliner, id ComponentID, job string, seq int64) {
	pipe.HSet(ctx, s.keys.Component(id), FieldCurrentJob, job, FieldCurrentSeq, strconv.FormatInt(seq, 10))
}
