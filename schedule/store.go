package schedule

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/internal/clock"
)

// Defaults of Settings and StoreConfig.
const (
	MaxPayloadDefault   = 1 << 20
	MisfireGraceDefault = time.Minute
	MaxCatchUpDefault   = 1000
	// RecentTasks is how many task ids a schedule's record keeps.
	RecentTasks = 10
)

// Settings are the cluster's rules for schedules (config `scheduler:`).
type Settings struct {
	// AllowSubsecond lets "@every" go below a second.
	AllowSubsecond bool
	// MisfireGrace is how late a tick may fire and still count as on
	// time (MisfireGraceDefault).
	MisfireGrace time.Duration
	// MaxCatchUp bounds the missed ticks catch_up all fires at once
	// (MaxCatchUpDefault); the older ones are skipped.
	MaxCatchUp int
}

// WithDefaults fills in the zero fields.
func (s Settings) WithDefaults() Settings {
	s.MisfireGrace = cmp.Or(s.MisfireGrace, MisfireGraceDefault)
	s.MaxCatchUp = cmp.Or(s.MaxCatchUp, MaxCatchUpDefault)
	return s
}

// StoreConfig configures a Store.
type StoreConfig struct {
	// Queues are the queues a schedule may name (the pools' queues); nil:
	// any.
	Queues []string
	// MaxPayload bounds a payload (MaxPayloadDefault).
	MaxPayload int
	Settings   Settings
	// TaskTimeouts are the pools' task timeouts, given to a task whose
	// schedule sets none.
	TaskTimeouts map[string]time.Duration
	Clock        clock.Clock
	Logger       *slog.Logger
	// Host is this host's id, in the events it writes.
	Host string
}

// Store reads and changes schedules in Redis; any host's admin server
// uses one. Only the leader fires ticks (Scheduler); Trigger enqueues a
// task of a schedule at once from any host.
type Store struct {
	cfg StoreConfig
	hs  *health.Store
}

// NewStore returns a store on hs's Redis.
func NewStore(hs *health.Store, cfg StoreConfig) *Store {
	cfg.MaxPayload = cmp.Or(cfg.MaxPayload, MaxPayloadDefault)
	cfg.Settings = cfg.Settings.WithDefaults()
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	cfg.Queues = slices.Clone(cfg.Queues)
	return &Store{cfg: cfg, hs: hs}
}

// Rules are what the store checks a definition against now.
func (s *Store) Rules() Rules {
	return Rules{Queues: s.cfg.Queues, MaxPayload: s.cfg.MaxPayload, AllowSubsecond: s.cfg.Settings.AllowSubsecond, Now: s.cfg.Clock.Now()}
}

func (s *Store) rdb() redis.UniversalClient { return s.hs.Client() }
func (s *Store) keys() health.Keys          { return s.hs.Keys() }

// checkName refuses a name that is no schedule name (it becomes part of a
// key).
func checkName(name string) error {
	if !namePattern.MatchString(name) {
		return invalid("name", trunc(name), "%q must match %s", trunc(name), namePattern)
	}
	return nil
}

// queueOf returns the queue of schedule name by the index.
func (s *Store) queueOf(ctx context.Context, name string) (string, error) {
	if err := checkName(name); err != nil {
		return "", err
	}
	q, err := s.rdb().HGet(ctx, s.keys().Schedules(), name).Result()
	if errors.Is(err, redis.Nil) {
		return "", fmt.Errorf("%w: %s", ErrNotFound, name)
	}
	if err != nil {
		return "", fmt.Errorf("read schedule %s: %w", name, err)
	}
	return q, nil
}

// List returns every schedule, by name.
func (s *Store) List(ctx context.Context) ([]View, error) {
	index, err := s.rdb().HGetAll(ctx, s.keys().Schedules()).Result()
	if err != nil {
		return nil, fmt.Errorf("list schedules: %w", err)
	}
	names := make([]string, 0, len(index))
	for n := range index {
		if !strings.HasPrefix(n, "#") {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	pipe := s.rdb().Pipeline()
	cmds := make([]*redis.MapStringStringCmd, len(names))
	for i, n := range names {
		cmds[i] = pipe.HGetAll(ctx, s.keys().Schedule(index[n], n))
	}
	if len(names) > 0 {
		if _, err := pipe.Exec(ctx); err != nil {
			return nil, fmt.Errorf("list schedules: %w", err)
		}
	}
	now := s.cfg.Clock.Now()
	out := make([]View, 0, len(names))
	for i, n := range names {
		v, ok, err := parseRecord(n, cmds[i].Val())
		if err != nil {
			s.cfg.Logger.Warn("unreadable schedule", "schedule", n, "err", err)
			continue
		}
		if ok {
			out = append(out, s.withNext(v, now))
		}
	}
	return out, nil
}

func (s *Store) withNext(v View, now time.Time) View {
	spec, err := ParseSpec(v.Spec, true)
	if err != nil {
		return v
	}
	return v.withNext(spec, now)
}

// Get returns schedule name.
func (s *Store) Get(ctx context.Context, name string) (View, error) {
	q, err := s.queueOf(ctx, name)
	if err != nil {
		return View{}, err
	}
	return s.get(ctx, q, name)
}

func (s *Store) get(ctx context.Context, q, name string) (View, error) {
	f, err := s.rdb().HGetAll(ctx, s.keys().Schedule(q, name)).Result()
	if err != nil {
		return View{}, fmt.Errorf("read schedule %s: %w", name, err)
	}
	v, ok, err := parseRecord(name, f)
	if err != nil {
		return View{}, err
	}
	if !ok {
		return View{}, fmt.Errorf("%w: %s", ErrNotFound, name)
	}
	return s.withNext(v, s.cfg.Clock.Now()), nil
}

// bump tells the leader that schedules changed.
func (s *Store) bump(ctx context.Context) error {
	return bumpScript.Run(ctx, s.rdb(), []string{s.keys().Schedules()}, health.ScheduleRevField, newRevBase()).Err()
}

// bumpIn is bump as part of pipe's round trip (EVAL: a pipeline cannot
// fall back from EVALSHA on NOSCRIPT).
func (s *Store) bumpIn(ctx context.Context, pipe redis.Pipeliner) {
	bumpScript.Eval(ctx, pipe, []string{s.keys().Schedules()}, health.ScheduleRevField, newRevBase())
}

// bumpScript moves the index's revision on by one; an index without one
// (never written, or lost with Redis's data) starts from a random base, not
// from 1. A revision is the leader's only sign that its cached schedules are
// stale: after a data loss the schedules written again would count from 1
// as the lost ones did, and a leader that had read revision 1 before the
// loss would keep planning from the lost records' start and last tick,
// firing again every tick since the first creation
// (TestRestoredByAnotherHostIsReadAgain).
//
// KEYS: index. ARGV: revision field, base.
var bumpScript = redis.NewScript(`
if redis.call("HEXISTS", KEYS[1], ARGV[1]) == 0 then
	redis.call("HSET", KEYS[1], ARGV[1], ARGV[2])
	return ARGV[2]
end
return redis.call("HINCRBY", KEYS[1], ARGV[1], 1)`)

// newRevBase is a random first revision: below 2^52, so that a billion
// bumps stay an integer Redis and Lua hold exactly.
func newRevBase() int64 {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return int64(binary.BigEndian.Uint64(b[:]) >> 12)
}

// Create adds schedule d (checked first; a taken name is a *FieldError
// wrapping ErrExists). Its ticks start now.
func (s *Store) Create(ctx context.Context, d Definition) (View, error) {
	if err := d.Check(s.Rules()); err != nil {
		return View{}, err
	}
	def, err := json.Marshal(d)
	if err != nil {
		return View{}, err
	}
	idx := s.keys().Schedules()
	set, err := s.rdb().HSetNX(ctx, idx, d.Name, d.Queue).Result()
	if err != nil {
		return View{}, fmt.Errorf("create schedule %s: %w", d.Name, err)
	}
	if !set {
		// Taken, unless the index names a record that is gone (a create
		// or a move cut short).
		q, err := s.rdb().HGet(ctx, idx, d.Name).Result()
		if err != nil {
			return View{}, fmt.Errorf("create schedule %s: %w", d.Name, err)
		}
		if n, err := s.rdb().Exists(ctx, s.keys().Schedule(q, d.Name)).Result(); err != nil || n > 0 {
			if err == nil {
				err = &FieldError{Field: "name", Value: d.Name, Err: fmt.Errorf("%w: %q", ErrExists, d.Name)}
			}
			return View{}, err
		}
		if err := s.rdb().HSet(ctx, idx, d.Name, d.Queue).Err(); err != nil {
			return View{}, fmt.Errorf("create schedule %s: %w", d.Name, err)
		}
	}
	now := ms(s.cfg.Clock.Now())
	ok, err := createScript.Run(ctx, s.rdb(), []string{s.keys().Schedule(d.Queue, d.Name)},
		fDef, def, fRev, 1, fPaused, 0, fSince, now, fCreatedAt, now, fUpdatedAt, now, fOp, opToken()).Int()
	if err != nil {
		return View{}, fmt.Errorf("create schedule %s: %w", d.Name, err)
	}
	if ok == 0 {
		return View{}, &FieldError{Field: "name", Value: d.Name, Err: fmt.Errorf("%w: %q", ErrExists, d.Name)}
	}
	if err := s.bump(ctx); err != nil {
		return View{}, fmt.Errorf("create schedule %s: %w", d.Name, err)
	}
	return s.get(ctx, d.Queue, d.Name)
}

// Update replaces the definition of schedule name with d (d.Name is name;
// its source stays). A new spec's ticks start now; with the same spec,
// ticks not yet decided fire with the new definition. Moving to another
// queue carries the schedule's state along.
func (s *Store) Update(ctx context.Context, name string, d Definition) (View, error) {
	if d.Name == "" {
		d.Name = name
	}
	if d.Name != name {
		return View{}, invalid("name", trunc(d.Name), "%q: a schedule cannot be renamed (delete it and create another)", trunc(d.Name))
	}
	old, err := s.Get(ctx, name)
	if err != nil {
		return View{}, err
	}
	d.Source = old.Source
	if err := d.Check(s.Rules()); err != nil {
		return View{}, err
	}
	def, err := json.Marshal(d)
	if err != nil {
		return View{}, err
	}
	now := ms(s.cfg.Clock.Now())
	if d.Queue == old.Queue {
		respec := "0"
		if d.Spec != old.Spec {
			respec = "1"
		}
		rev, err := updateScript.Run(ctx, s.rdb(), []string{s.keys().Schedule(d.Queue, name)}, def, now, respec, opToken()).Int64()
		if err != nil {
			return View{}, fmt.Errorf("update schedule %s: %w", name, err)
		}
		if rev < 0 {
			return View{}, fmt.Errorf("%w: %s", ErrNotFound, name)
		}
	} else if err := s.move(ctx, old, d, def, now); err != nil {
		return View{}, err
	}
	if err := s.bump(ctx); err != nil {
		return View{}, fmt.Errorf("update schedule %s: %w", name, err)
	}
	return s.get(ctx, d.Queue, name)
}

// move puts schedule old under d's queue: its record is taken from the
// old queue's slot (a fire after that finds none) and written in the new
// one with its state.
func (s *Store) move(ctx context.Context, old View, d Definition, def []byte, now string) error {
	raw, err := s.take(ctx, old.Queue, old.Name)
	if err != nil {
		return fmt.Errorf("move schedule %s: %w", old.Name, err)
	}
	if len(raw) == 0 {
		return fmt.Errorf("%w: %s", ErrNotFound, old.Name)
	}
	f := map[string]string{}
	for i := 0; i+1 < len(raw); i += 2 {
		f[raw[i]] = raw[i+1]
	}
	rev, _ := strconv.ParseInt(f[fRev], 10, 64)
	f[fDef], f[fRev], f[fUpdatedAt], f[fOp] = string(def), strconv.FormatInt(rev+1, 10), now, opToken()
	if d.Spec != old.Spec {
		f[fSince] = now
	}
	args := make([]any, 0, 2*len(f))
	for k, v := range f {
		args = append(args, k, v)
	}
	if err := s.rdb().HSet(ctx, s.keys().Schedules(), d.Name, d.Queue).Err(); err != nil {
		return fmt.Errorf("move schedule %s: %w", old.Name, err)
	}
	if _, err := createScript.Run(ctx, s.rdb(), []string{s.keys().Schedule(d.Queue, d.Name)}, args...).Result(); err != nil {
		return fmt.Errorf("move schedule %s: %w", old.Name, err)
	}
	return nil
}

// take deletes schedule name's record in queue q and returns its fields
// (none if there is none), once: see takeScript.
func (s *Store) take(ctx context.Context, q, name string) ([]string, error) {
	return takeScript.Run(ctx, s.rdb(), []string{s.keys().Schedule(q, name), s.keys().ScheduleTaken(q, name)}, opToken()).StringSlice()
}

// opToken is a random token naming one operation on a record (fOp).
func opToken() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Delete removes schedule name (its tasks stay in their queue).
func (s *Store) Delete(ctx context.Context, name string) error {
	q, err := s.queueOf(ctx, name)
	if err != nil {
		return err
	}
	if _, err := s.take(ctx, q, name); err != nil {
		return fmt.Errorf("delete schedule %s: %w", name, err)
	}
	pipe := s.rdb().Pipeline()
	pipe.HDel(ctx, s.keys().Schedules(), name)
	s.bumpIn(ctx, pipe)
	pipe.Del(ctx, asynqHistoryKey(entryID(s.keys().Prefix, name)))
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("delete schedule %s: %w", name, err)
	}
	return nil
}

// SetPaused pauses or resumes schedule name. A paused schedule fires no
// tick; a resumed one fires the ticks after the resume (changed reports
// whether it was not already so).
func (s *Store) SetPaused(ctx context.Context, name string, paused bool) (v View, changed bool, err error) {
	q, err := s.queueOf(ctx, name)
	if err != nil {
		return View{}, false, err
	}
	flag := "0"
	if paused {
		flag = "1"
	}
	rev, err := pauseScript.Run(ctx, s.rdb(), []string{s.keys().Schedule(q, name)}, flag, ms(s.cfg.Clock.Now()), opToken()).Int64()
	if err != nil {
		return View{}, false, fmt.Errorf("pause schedule %s: %w", name, err)
	}
	if rev < 0 {
		return View{}, false, fmt.Errorf("%w: %s", ErrNotFound, name)
	}
	if rev > 0 {
		if err := s.bump(ctx); err != nil {
			return View{}, false, fmt.Errorf("pause schedule %s: %w", name, err)
		}
	}
	v, err = s.get(ctx, q, name)
	return v, rev > 0, err
}

// Trigger enqueues a task of schedule name now, paused or not, with an id
// of its own (no tick is decided by it), and announces it.
func (s *Store) Trigger(ctx context.Context, name string) (taskID string, v View, err error) {
	v, err = s.Get(ctx, name)
	if err != nil {
		return "", View{}, err
	}
	now := s.cfg.Clock.Now()
	var b [3]byte
	_, _ = rand.Read(b[:])
	id := triggerID(name, now, hex.EncodeToString(b[:]))
	t, err := newTask(v.Definition, id, s.cfg.TaskTimeouts[v.Queue])
	if err != nil {
		return "", View{}, err
	}
	res, _, err := runFire(ctx, s.rdb(), s.keys(), fireArgs{queue: v.Queue, name: name, now: now, task: t})
	if err != nil {
		return "", View{}, fmt.Errorf("trigger schedule %s: %w", name, err)
	}
	switch res {
	case resEnqueued:
	case resGone:
		return "", View{}, fmt.Errorf("%w: %s", ErrNotFound, name)
	case resDuplicate:
		return "", View{}, fmt.Errorf("trigger schedule %s: %w", name, ErrUniqueLocked)
	default:
		return "", View{}, fmt.Errorf("trigger schedule %s: %s", name, res)
	}
	fired := s.cfg.Clock.Now()
	pipe := s.rdb().Pipeline()
	afterFire(ctx, pipe, s.hs, FiredData{Schedule: name, Queue: v.Queue, TaskID: id, Result: res, Manual: true,
		Host: s.cfg.Host, At: fired.UnixMilli()}, entryID(s.keys().Prefix, name), fired)
	if _, err := pipe.Exec(ctx); err != nil {
		s.cfg.Logger.Warn("announce a triggered schedule", "schedule", name, "task", id, "err", err)
	}
	v, err = s.get(ctx, v.Queue, name)
	return id, v, err
}

// ErrUniqueLocked refuses a trigger while the schedule's uniqueness lock
// (its unique option) is held by an earlier task.
var ErrUniqueLocked = errors.New("an earlier task of this schedule holds its uniqueness lock")

// ApplyConfig makes the cluster's schedules from configurations match
// defs, unless defs are the ones a host applied last (then schedules
// changed through the API since then stand) or there are none: new ones are created,
// changed ones updated (paused ones stay paused), and those of an earlier
// configuration that defs lacks are deleted. It reports whether it
// applied them.
func (s *Store) ApplyConfig(ctx context.Context, defs []Definition) (bool, error) {
	if len(defs) == 0 {
		// A host configured without schedules (one that joins the cluster
		// to run workers) leaves the cluster's alone.
		return false, nil
	}
	for i := range defs {
		defs[i].Source = SourceConfig
		if err := defs[i].Check(s.Rules()); err != nil {
			return false, fmt.Errorf("schedules[%d]: %w", i, err)
		}
	}
	blob, _ := json.Marshal(defs)
	sum := sha256.Sum256(blob)
	digest := hex.EncodeToString(sum[:])
	was, err := s.rdb().HGet(ctx, s.keys().Schedules(), health.ScheduleConfigField).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return false, fmt.Errorf("apply configured schedules: %w", err)
	}
	if was == digest {
		return false, nil
	}
	have, err := s.List(ctx)
	if err != nil {
		return false, err
	}
	byName := map[string]View{}
	for _, v := range have {
		byName[v.Name] = v
	}
	want := map[string]bool{}
	for _, d := range defs {
		want[d.Name] = true
		old, ok := byName[d.Name]
		switch {
		case !ok:
			_, err = s.Create(ctx, d)
			if errors.Is(err, ErrExists) {
				// Another host applying its configuration at the same
				// time created it after our List: take it as found.
				var cur View
				if cur, err = s.Get(ctx, d.Name); err == nil && (cur.Source != SourceConfig || !cur.Definition.same(d)) {
					err = s.adopt(ctx, cur, d)
				}
			}
		case old.Source != SourceConfig || !old.Definition.same(d):
			// Adopt the schedule: config-sourced from now on.
			err = s.adopt(ctx, old, d)
		}
		if err != nil {
			return false, fmt.Errorf("apply configured schedule %s: %w", d.Name, err)
		}
	}
	for _, v := range have {
		if v.Source == SourceConfig && !want[v.Name] {
			if err := s.Delete(ctx, v.Name); err != nil && !errors.Is(err, ErrNotFound) {
				return false, fmt.Errorf("remove schedule %s (no longer configured): %w", v.Name, err)
			}
		}
	}
	// The digest last, and only if every configured schedule is still in
	// the index: Redis may have lost its data since the creates (a FLUSHALL
	// between a create's index entry and its record leaves a record, an
	// index holding a revision and the digest, and no entry: the leader
	// would see no schedule, and the digest would say the configuration
	// was in; TestApplyConfigCutShortByADataLoss). Then the whole
	// configuration is applied again.
	names := make([]any, 0, 3+len(defs))
	names = append(names, health.ScheduleConfigField, digest)
	for _, d := range defs {
		names = append(names, d.Name)
	}
	ok, err := configDigestScript.Run(ctx, s.rdb(), []string{s.keys().Schedules()}, names...).Int()
	if err != nil {
		return false, fmt.Errorf("apply configured schedules: %w", err)
	}
	if ok == 0 {
		return false, fmt.Errorf("apply configured schedules: %w", errConfigCutShort)
	}
	return true, nil
}

// errConfigCutShort: a schedule of the configuration is gone from the index
// by the time its digest is written (Redis lost its data meanwhile).
var errConfigCutShort = errors.New("a configured schedule is gone from Redis since it was written (Redis lost its data): not applied, to be applied again")

// configDigestScript writes the configuration's digest into the index if
// every configured schedule is in it. KEYS: index. ARGV: 1 the digest's
// field, 2 the digest, 3.. the configured names. Returns 1, or 0 (nothing
// written).
var configDigestScript = redis.NewScript(`
for i = 3, #ARGV do
	if redis.call("HEXISTS", KEYS[1], ARGV[i]) == 0 then
		return 0
	end
end
redis.call("HSET", KEYS[1], ARGV[1], ARGV[2])
return 1`)

// adopt updates old to d, source included.
func (s *Store) adopt(ctx context.Context, old View, d Definition) error {
	if old.Source != d.Source {
		// Update keeps the stored source: write it first.
		o := old.Definition
		o.Source = d.Source
		def, _ := json.Marshal(o)
		if _, err := updateScript.Run(ctx, s.rdb(), []string{s.keys().Schedule(old.Queue, old.Name)}, def, ms(s.cfg.Clock.Now()), "0", opToken()).Result(); err != nil {
			return err
		}
	}
	_, err := s.Update(ctx, d.Name, d)
	return err
}
