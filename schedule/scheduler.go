package schedule

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/internal/clock"
)

// Defaults of Config.
const (
	// RefreshDefault is the longest the leader goes without looking for
	// schedules changed by other hosts.
	RefreshDefault = time.Second
	// EntriesEveryDefault is how often the leader rewrites asynq's
	// scheduler entries (asynq's scheduler heartbeat); they expire after
	// twice that.
	EntriesEveryDefault = 5 * time.Second
	// retryDelay is the wait after a failed Redis call.
	retryDelay = 500 * time.Millisecond
)

// Metrics counts fires. *metrics.Metrics implements it.
type Metrics interface {
	// ScheduleFires counts n ticks (or triggers) of a schedule by result:
	// enqueued, duplicate, conflict, skipped.
	ScheduleFires(schedule, result string, n int)
	// ScheduleLag observes the time from a tick to its enqueue.
	ScheduleLag(d time.Duration)
}

// Config configures a Scheduler.
type Config struct {
	Settings Settings
	// TaskTimeouts are the pools' task timeouts, given to a task whose
	// schedule sets none.
	TaskTimeouts map[string]time.Duration
	Host         string
	Refresh      time.Duration // RefreshDefault
	EntriesEvery time.Duration // EntriesEveryDefault
	Metrics      Metrics
	Clock        clock.Clock
	Logger       *slog.Logger
	// Restore, if set, writes this host's configured schedules again
	// (Store.ApplyConfig) and reports whether it wrote any. The leader
	// calls it when the cluster's schedules index is gone altogether:
	// Redis lost its data (a restart without persistence, a FLUSHALL, a
	// failover to an empty replica), and with it every schedule. Without
	// it the configured schedules would stay lost until a host restarts.
	Restore func(ctx context.Context) (bool, error)
}

// Scheduler fires the cluster's schedules while this host leads. Every
// host runs one; the supervisor's leader step tells it whether this host
// holds the leader lease (Leading). A tick is decided (enqueued or
// skipped) in one script with the enqueue, so two schedulers that both
// believe they lead (a partition, a paused process) still enqueue each
// tick at most once: leadership only decides who does the work.
type Scheduler struct {
	cfg Config
	hs  *health.Store

	mu    sync.Mutex
	until time.Time // leading until then

	wake chan struct{}

	// Owned by the loop (or by a test calling step).
	rev       string // the index's revision the cache was read at
	loaded    bool
	cache     map[string]*cached
	names     []string
	entriesAt time.Time
	failing   bool
	timer     clock.Timer

	life    sync.Mutex
	cancel  context.CancelFunc
	done    chan struct{}
	stopped bool
	onStep  func(next time.Time) // tests: after each step

	beforeFire func(name string, tick time.Time) // tests: between the plan and a fire
}

// cached is the leader's copy of one schedule.
type cached struct {
	v    View
	spec Spec
}

// New returns a scheduler on hs's Redis; Start runs it.
func New(hs *health.Store, cfg Config) *Scheduler {
	cfg.Settings = cfg.Settings.WithDefaults()
	cfg.Refresh = cmp.Or(cfg.Refresh, RefreshDefault)
	cfg.EntriesEvery = cmp.Or(cfg.EntriesEvery, EntriesEveryDefault)
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Scheduler{cfg: cfg, hs: hs, wake: make(chan struct{}, 1)}
}

// Leading tells the scheduler whether this host holds the leader lease,
// and until when at least (when the lease was claimed or renewed, plus
// its length). It fires only until then.
func (s *Scheduler) Leading(leading bool, until time.Time) {
	s.mu.Lock()
	if leading {
		s.until = until
	} else {
		s.until = time.Time{}
	}
	s.mu.Unlock()
	s.poke()
}

func (s *Scheduler) leadingUntil() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.until
}

func (s *Scheduler) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Start runs the scheduler until Stop. It is a no-op after Stop.
func (s *Scheduler) Start() {
	s.life.Lock()
	defer s.life.Unlock()
	if s.cancel != nil || s.stopped {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel, s.done = cancel, make(chan struct{})
	go s.run(ctx)
	s.poke()
}

// Stop ends the scheduler and waits for it; safe before Start and twice.
func (s *Scheduler) Stop() {
	s.life.Lock()
	s.stopped = true
	cancel, done := s.cancel, s.done
	s.life.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}

func (s *Scheduler) run(ctx context.Context) {
	defer close(s.done)
	defer func() {
		if s.timer != nil {
			s.timer.Stop()
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.wake:
		}
		next := s.step(ctx)
		if s.timer != nil {
			s.timer.Stop()
			s.timer = nil
		}
		switch d := next.Sub(s.cfg.Clock.Now()); {
		case next.IsZero(): // not leading: Leading wakes it
		case d <= 0:
			s.poke()
		default:
			s.timer = s.cfg.Clock.AfterFunc(d, s.poke)
		}
		if s.onStep != nil {
			s.onStep(next)
		}
	}
}

// errStale stops a schedule's fires until the cache is read again.
var errStale = errors.New("schedule changed")

// step fires what is due now and returns when to look again (zero: not
// leading; wait for Leading).
func (s *Scheduler) step(ctx context.Context) time.Time {
	now := s.cfg.Clock.Now()
	until := s.leadingUntil()
	if !now.Before(until) {
		s.loaded = false // a new term reads everything again
		return time.Time{}
	}
	if err := s.refresh(ctx); err != nil {
		s.fail("read schedules", err)
		return now.Add(retryDelay)
	}
	next := now.Add(s.cfg.Refresh)
	failed := false
	for _, name := range s.names {
		c := s.cache[name]
		if c.v.Paused {
			continue
		}
		err := s.fireDue(ctx, c, now)
		switch {
		case errors.Is(err, errStale):
			s.cfg.Logger.Info("scheduler: schedule changed while firing: reading the schedules again", "schedule", name)
			s.loaded = false
			next = now
			continue
		case err != nil:
			s.fail("fire schedule "+name, err)
			failed = true
			if r := now.Add(retryDelay); r.Before(next) {
				next = r
			}
			continue
		}
		if n := c.v.withNext(c.spec, now).Next; !n.IsZero() && n.Before(next) {
			next = n
		}
	}
	if !failed {
		s.recovered()
	}
	if now.Sub(s.entriesAt) >= s.cfg.EntriesEvery {
		if err := s.writeEntries(ctx, now); err != nil {
			s.fail("write asynq's scheduler entries", err)
		} else {
			s.entriesAt = now
		}
	}
	return next
}

func (s *Scheduler) fail(what string, err error) {
	if !s.failing {
		s.cfg.Logger.Warn("scheduler: "+what, "err", err)
	}
	s.failing = true
}

func (s *Scheduler) recovered() {
	if s.failing {
		s.cfg.Logger.Info("scheduler: Redis answers again")
	}
	s.failing = false
}

// refresh reads the schedules again when the index's revision moved.
func (s *Scheduler) refresh(ctx context.Context) error {
	keys := s.hs.Keys()
	vals, err := s.hs.Client().HMGet(ctx, keys.Schedules(), health.ScheduleRevField, health.ScheduleConfigField).Result()
	if err != nil {
		return err
	}
	rev, _ := vals[0].(string)
	applied, _ := vals[1].(string)
	if s.loaded && rev == s.rev {
		return nil
	}
	if (rev == "" || applied == "") && s.cfg.Restore != nil {
		// No revision, or no configuration applied: the index was never
		// written, or Redis lost it, or a restore was cut short by
		// another loss (a FLUSHALL between a restore's create and its
		// revision bump leaves an index with a revision and no schedule;
		// read as current, the configured schedule would never come
		// back: TestRestoreCutShortByAnotherLossIsDoneAgain). The
		// configuration's schedules belong there (a
		// revision of their own follows; ticks before now stay lost with
		// the data, none is fired twice: the restored records start now).
		// The configuration's digest is written last, once it is all in.
		restored, err := s.cfg.Restore(ctx)
		if err != nil {
			return err
		}
		if restored {
			s.cfg.Logger.Warn("scheduler: the cluster's schedules were gone from Redis (it lost its data): this host's configured schedules written again")
			if rev, err = s.hs.Client().HGet(ctx, keys.Schedules(), health.ScheduleRevField).Result(); err != nil && !errors.Is(err, redis.Nil) {
				return err
			}
		}
	}
	index, err := s.hs.Client().HGetAll(ctx, keys.Schedules()).Result()
	if err != nil {
		return err
	}
	var names []string
	for n := range index {
		if !strings.HasPrefix(n, "#") {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	pipe := s.hs.Client().Pipeline()
	cmds := make([]*redis.MapStringStringCmd, len(names))
	for i, n := range names {
		cmds[i] = pipe.HGetAll(ctx, keys.Schedule(index[n], n))
	}
	if len(names) > 0 {
		if _, err := pipe.Exec(ctx); err != nil {
			return err
		}
	}
	cache := map[string]*cached{}
	s.names = s.names[:0]
	for i, n := range names {
		v, ok, err := parseRecord(n, cmds[i].Val())
		if !ok {
			continue
		}
		var spec Spec
		if err == nil {
			// Checked when it was written; a host with stricter settings
			// still fires what the cluster accepted.
			spec, err = ParseSpec(v.Spec, true)
		}
		if err != nil {
			if old := s.cache[n]; old == nil || old.v.Rev != v.Rev {
				s.cfg.Logger.Warn("scheduler: schedule not fired: unreadable", "schedule", n, "err", err)
			}
			cache[n] = &cached{v: v}
			continue
		}
		cache[n] = &cached{v: v, spec: spec}
		s.names = append(s.names, n)
	}
	s.cache, s.rev, s.loaded = cache, rev, true
	s.cfg.Logger.Info("scheduler: schedules read", "revision", rev, "schedules", len(s.names), "listed", len(names))
	s.entriesAt = time.Time{} // rewrite asynq's entries now
	return nil
}

// maxReplans bounds how often one step plans a schedule again after
// another fire moved it.
const maxReplans = 3

// fireDue decides the due ticks of one schedule by its catch-up policy.
// When another fire decided ticks meanwhile (an old leader still at work,
// or a fire whose reply was lost), it plans again from there.
func (s *Scheduler) fireDue(ctx context.Context, c *cached, now time.Time) error {
	for range maxReplans {
		moved, err := s.decide(ctx, c, now)
		if err != nil || !moved {
			return err
		}
	}
	return nil
}

// decide plans the due ticks of one schedule and carries the plan out;
// moved reports that another fire had moved the schedule on (c has its
// last tick now), which ended the plan.
func (s *Scheduler) decide(ctx context.Context, c *cached, now time.Time) (moved bool, err error) {
	v := c.v
	p := makePlan(c.spec, v.CatchUp, v.from(), now, s.cfg.Settings.MisfireGrace, s.cfg.Settings.MaxCatchUp)
	if len(p.fire) == 0 && p.skipTo.IsZero() {
		return false, nil
	}
	rev := strconv.FormatInt(v.Rev, 10)
	pipe := s.hs.Client().Pipeline()
	defer func() {
		if pipe.Len() > 0 {
			if _, err := pipe.Exec(context.WithoutCancel(ctx)); err != nil {
				s.cfg.Logger.Warn("scheduler: announce fires", "schedule", v.Name, "err", err)
			}
		}
	}()
	firedMissed := 0
	for i, tick := range p.fire {
		skipped := 0
		if i == 0 {
			skipped = p.skipped
		}
		t, err := newTask(v.Definition, tickID(v.Name, tick), s.cfg.TaskTimeouts[v.Queue])
		if err != nil {
			return false, err
		}
		if s.beforeFire != nil {
			s.beforeFire(v.Name, tick)
		}
		res, last, err := runFire(ctx, s.hs.Client(), s.hs.Keys(), fireArgs{queue: v.Queue, name: v.Name, rev: rev,
			tick: tick, now: s.cfg.Clock.Now(), skipped: skipped, last: c.v.LastTick, task: t})
		if err != nil {
			return false, err
		}
		switch res {
		case resEnqueued, resDuplicate, resConflict:
			at := s.cfg.Clock.Now()
			lag := at.Sub(tick)
			c.v.LastTick = tick
			if res == resEnqueued {
				c.v.LastFired, c.v.LastFiredAt, c.v.LastTask = tick, at, t.id
				if !p.lastMissed.IsZero() && !tick.After(p.lastMissed) {
					firedMissed++
				}
				if s.cfg.Metrics != nil {
					s.cfg.Metrics.ScheduleLag(lag)
				}
			}
			if s.cfg.Metrics != nil {
				s.cfg.Metrics.ScheduleFires(v.Name, res, 1)
			}
			afterFire(ctx, pipe, s.hs, FiredData{Schedule: v.Name, Queue: v.Queue, Tick: tick.UnixMilli(), TaskID: t.id,
				Result: res, LagMS: float64(lag.Microseconds()) / 1000, Host: s.cfg.Host, At: at.UnixMilli()},
				entryID(s.hs.Keys().Prefix, v.Name), at)
		case resMoved:
			if i > 0 {
				s.missed(ctx, pipe, v, p, firedMissed)
			}
			if last.Before(c.v.LastTick) {
				// A record's last tick only moves on, unless the record
				// was written anew: Redis lost its data and the
				// schedule was restored since it was read. Its start
				// moved too: read it again, never plan from the lost
				// state (TestRestoredDuringAFireIsReadAgain).
				return false, errStale
			}
			c.v.LastTick = last
			return true, nil
		default: // stale, paused, gone
			if i > 0 {
				s.missed(ctx, pipe, v, p, firedMissed)
			}
			return false, errStale
		}
	}
	if !p.skipTo.IsZero() {
		res, last, err := runSkip(ctx, s.hs.Client(), s.hs.Keys(), v.Queue, v.Name, rev, p.skipTo, c.v.LastTick, p.skipped)
		if err != nil {
			return false, err
		}
		switch res {
		case resSkipped:
			c.v.LastTick = p.skipTo
		case resMoved:
			if last.Before(c.v.LastTick) {
				return false, errStale // written anew since it was read, as above
			}
			c.v.LastTick = last
			return true, nil
		default:
			return false, errStale
		}
	}
	s.missed(ctx, pipe, v, p, firedMissed)
	return false, nil
}

// missed announces, and counts, the missed ticks of a plan whose first
// decision applied.
func (s *Scheduler) missed(ctx context.Context, pipe redis.Pipeliner, v View, p plan, fired int) {
	if p.missed == 0 {
		return
	}
	if s.cfg.Metrics != nil && p.skipped > 0 {
		s.cfg.Metrics.ScheduleFires(v.Name, resSkipped, p.skipped)
	}
	s.cfg.Logger.Info("scheduler: missed ticks", "schedule", v.Name, "policy", string(v.CatchUp), "missed", p.missed,
		"fired", fired, "skipped", p.skipped, "first", p.firstMissed, "last", p.lastMissed)
	missedEvent(ctx, pipe, s.hs, MissedData{Schedule: v.Name, Queue: v.Queue, Policy: v.CatchUp, Missed: p.missed,
		FirstMissed: p.firstMissed.UnixMilli(), LastMissed: p.lastMissed.UnixMilli(), Fired: fired,
		Skipped: p.skipped, Capped: p.capped, Host: s.cfg.Host}, s.cfg.Clock.Now())
}
