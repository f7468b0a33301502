package schedule_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/schedule"
)

// Redis lost its data (a restart without persistence, a FLUSHALL, a
// failover to an empty replica): the configured schedules come back by
// themselves on the leader, start from the moment they are written again,
// and fire no tick twice; without Restore they stay lost.
func TestConfiguredSchedulesComeBackAfterDataLoss(t *testing.T) {
	for _, restore := range []bool{true, false} {
		name := map[bool]string{true: "restored", false: "lost without Restore"}[restore]
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			defs := func() []schedule.Definition {
				return []schedule.Definition{{Name: "every", Spec: "@every 1s", Queue: e.q, Type: "report", CatchUp: schedule.CatchUpAll}}
			}
			if applied, err := e.store.ApplyConfig(e.ctx(), defs()); err != nil || !applied {
				t.Fatalf("ApplyConfig: %v, %v", applied, err)
			}
			restores := 0
			a := e.scheduler("a", true, func(c *schedule.Config) {
				if restore {
					c.Restore = func(ctx context.Context) (bool, error) {
						restores++
						return e.store.ApplyConfig(ctx, defs())
					}
				}
			})
			for i := 1; i <= 2; i++ {
				e.at(time.Duration(i)*time.Second + time.Millisecond)
				a.Step(e.ctx())
			}
			if got, want := e.tasks(), tickIDs("every", secs(1, 2)...); !same(got, want) {
				t.Fatalf("tasks before the loss %v, want %v", got, want)
			}
			if restores != 0 {
				t.Errorf("Restore called %d times while the schedules were there", restores)
			}
			e.loseData()
			// The loss goes unnoticed for 2.5 s: ticks 3 and 4 are lost with
			// the data; 5, 6 fire; nothing fires twice.
			e.at(4500 * time.Millisecond)
			a.Step(e.ctx())
			for i := 5; i <= 6; i++ {
				e.at(time.Duration(i)*time.Second + time.Millisecond)
				a.Step(e.ctx())
			}
			var want []string
			if restore {
				want = tickIDs("every", secs(5, 6)...)
			}
			if got := e.tasks(); !same(got, want) {
				t.Fatalf("tasks after the loss %v, want %v", got, want)
			}
			if restore {
				if restores != 1 {
					t.Errorf("Restore called %d times, want once", restores)
				}
				if v := e.view("every"); v.Source != schedule.SourceConfig || v.Fires != 2 {
					t.Errorf("restored schedule: source %q, fires %d", v.Source, v.Fires)
				}
			}
		})
	}
}

// loseData deletes every key of the env (Vigil's and asynq's of its
// queue), as a FLUSHALL would, without touching other tests' keys on a
// shared Redis.
func (e *env) loseData() {
	e.t.Helper()
	ctx := e.ctx()
	for _, pattern := range []string{e.redis.Prefix + "*", "asynq:{" + e.q + "}:*"} {
		keys, err := e.redis.Client.Keys(ctx, pattern).Result()
		if err != nil {
			e.t.Fatal(err)
		}
		if len(keys) > 0 {
			if err := e.redis.Client.Del(ctx, keys...).Err(); err != nil {
				e.t.Fatal(err)
			}
		}
	}
}

// Hosts of one cluster start at once with the same configuration: each
// applies it, and none fails to start because another created a schedule
// between its read and its create (found by the fault explorer, seed 704).
func TestHostsApplyTheSameConfigurationAtOnce(t *testing.T) {
	e := newEnv(t)
	for round := range 20 {
		defs := func() []schedule.Definition {
			return []schedule.Definition{
				{Name: fmt.Sprintf("a%d", round), Spec: "@every 1s", Queue: e.q, Type: "report"},
				{Name: fmt.Sprintf("b%d", round), Spec: "@every 1m", Queue: e.q, Type: "report"},
			}
		}
		var wg sync.WaitGroup
		errs := make(chan error, 4)
		for range 4 {
			st := schedule.NewStore(e.hs, schedule.StoreConfig{Queues: []string{e.q}, Clock: e.clock})
			wg.Go(func() {
				if _, err := st.ApplyConfig(e.ctx(), defs()); err != nil {
					errs <- err
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("round %d: a host failed to apply the configuration: %v", round, err)
		}
		for _, d := range defs() {
			if v := e.view(d.Name); v.Source != schedule.SourceConfig {
				t.Errorf("round %d: %s has source %q", round, d.Name, v.Source)
			}
		}
	}
}

// Fault explorer E37: Redis lost its data and another host wrote the
// configured schedules again before the leader looked. The records and the
// index's revision start again from 1 after a loss, so the leader's cache,
// read at revision 1 before the loss, looked current: it planned from the
// lost record's start and last tick, re-fired every tick since the
// schedule's first creation (ticks run before the loss ran twice) and, as
// its fires and the restored record's moved the last tick in turn, decided
// a tick as skipped that neither enqueued (the explorer's gap). The leader
// reads the restored schedules: nothing before the restore fires, and every
// tick after it fires once.
func TestRestoredByAnotherHostIsReadAgain(t *testing.T) {
	e, a, defs := leaderFiredTwice(t)
	if got, want := e.tasks(), tickIDs("every", secs(1, 2)...); !same(got, want) {
		t.Fatalf("tasks before the loss %v, want %v", got, want)
	}
	e.loseData()
	// Another host finds the schedules gone and writes them again at 4.5 s
	// (its Restore, as the leader's would).
	e.at(4500 * time.Millisecond)
	if applied, err := e.store.ApplyConfig(e.ctx(), defs()); err != nil || !applied {
		t.Fatalf("the other host's restore: %v, %v", applied, err)
	}
	for i := 5; i <= 7; i++ {
		e.at(time.Duration(i)*time.Second + time.Millisecond)
		a.Step(e.ctx())
	}
	if got, want := e.tasks(), tickIDs("every", secs(5, 7)...); !same(got, want) {
		t.Fatalf("tasks after the loss %v, want %v (ticks from the restore on, each once)", got, want)
	}
}

// E37, the same within one step: the data is lost and the schedules
// written again by another host between the leader's read of the
// revision and its fire. The fire finds the record's last tick behind the
// one the leader read, which only a record written anew can do: the leader
// reads the schedules again rather than planning from the lost state.
func TestRestoredDuringAFireIsReadAgain(t *testing.T) {
	e, a, defs := leaderFiredTwice(t)
	lost := false
	a.BeforeFire(func(string, time.Time) {
		if !lost {
			lost = true
			e.loseData()
			if applied, err := e.store.ApplyConfig(e.ctx(), defs()); err != nil || !applied {
				t.Errorf("the other host's restore: %v, %v", applied, err)
			}
		}
	})
	for i := 3; i <= 5; i++ {
		e.at(time.Duration(i)*time.Second + time.Millisecond)
		a.Step(e.ctx())
	}
	if got, want := e.tasks(), tickIDs("every", secs(4, 5)...); !same(got, want) {
		t.Fatalf("tasks after the loss %v, want %v (ticks from the restore at 3.001 s on, each once)", got, want)
	}
}

// leaderFiredTwice is an env with the configured schedule "every" (each
// second, catch_up all) and its leader a, whose Restore writes it again,
// after a fired the ticks at 1 s and 2 s.
func leaderFiredTwice(t *testing.T) (*env, *schedule.Scheduler, func() []schedule.Definition) {
	t.Helper()
	e := newEnv(t)
	defs := func() []schedule.Definition {
		return []schedule.Definition{{Name: "every", Spec: "@every 1s", Queue: e.q, Type: "report", CatchUp: schedule.CatchUpAll}}
	}
	if applied, err := e.store.ApplyConfig(e.ctx(), defs()); err != nil || !applied {
		t.Fatalf("ApplyConfig: %v, %v", applied, err)
	}
	a := e.scheduler("a", true, func(c *schedule.Config) {
		c.Restore = func(ctx context.Context) (bool, error) { return e.store.ApplyConfig(ctx, defs()) }
	})
	for i := 1; i <= 2; i++ {
		e.at(time.Duration(i)*time.Second + time.Millisecond)
		a.Step(e.ctx())
	}
	return e, a, defs
}

// Explorer seed 171290: Redis lost its data again while the leader was
// writing the configured schedules back, between the record's creation and
// the index's revision bump. The bump made a new index holding a revision
// and nothing else; the leader, which restored only an index with no
// revision, read it, found no schedule, and fired nothing for the rest of
// the seed. The configuration's digest is written last: an index without
// it has not got the configuration, and the leader writes it again.
func TestRestoreCutShortByAnotherLossIsDoneAgain(t *testing.T) {
	e, a, _ := leaderFiredTwice(t)
	e.loseData()
	// What the cut-short restore left: a revision, no schedule, no digest.
	if err := e.redis.Client.HSet(e.ctx(), e.hs.Keys().Schedules(), health.ScheduleRevField, "164484808908043").Err(); err != nil {
		t.Fatal(err)
	}
	for i := 5; i <= 7; i++ {
		e.at(time.Duration(i)*time.Second + time.Millisecond)
		a.Step(e.ctx())
	}
	if got, want := e.tasks(), tickIDs("every", secs(6, 7)...); !same(got, want) {
		t.Fatalf("tasks after the loss %v, want %v (ticks from the restore at 5.001 s on, each once)", got, want)
	}
}

// Explorer seed 171290, the restore itself: Redis lost its data between a
// create's index entry and its record. The create went on (record,
// revision), and the configuration's digest was written into an index
// without the schedule: the leader saw none, and the digest said the
// configuration was in. The digest is written only if every configured
// schedule is in the index; else the apply fails, and the next one puts
// the schedule back.
func TestApplyConfigCutShortByADataLoss(t *testing.T) {
	e := newEnv(t)
	defs := func() []schedule.Definition {
		return []schedule.Definition{{Name: "every", Spec: "@every 1s", Queue: e.q, Type: "report"}}
	}
	idx := e.hs.Keys().Schedules()
	lost := false
	client := redis.NewClient(e.redis.Client.Options())
	t.Cleanup(func() { _ = client.Close() })
	client.AddHook(lossAfter{name: "hsetnx", do: func() {
		if !lost {
			lost = true
			if err := e.redis.Client.Del(context.Background(), idx).Err(); err != nil {
				t.Error(err)
			}
		}
	}})
	st := schedule.NewStore(health.NewStore(client, e.redis.Prefix, 0), schedule.StoreConfig{Queues: []string{e.q}, Clock: e.clock, Host: "h0"})
	if applied, err := st.ApplyConfig(e.ctx(), defs()); err == nil || applied {
		t.Fatalf("ApplyConfig across a data loss: %v, %v; want an error", applied, err)
	}
	if !lost {
		t.Fatal("the data loss was not injected: the test tests nothing")
	}
	if got := e.redis.Client.HGet(e.ctx(), idx, health.ScheduleConfigField).Val(); got != "" {
		t.Fatalf("the configuration's digest was written (%q) with the schedule missing from the index", got)
	}
	if applied, err := st.ApplyConfig(e.ctx(), defs()); err != nil || !applied {
		t.Fatalf("ApplyConfig again: %v, %v", applied, err)
	}
	if v := e.view("every"); v.Source != schedule.SourceConfig {
		t.Errorf("the schedule after the second apply: source %q", v.Source)
	}
}

// lossAfter calls do once a command named name has run.
type lossAfter struct {
	name string
	do   func()
}

func (lossAfter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h lossAfter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if cmd.Name() == h.name {
			h.do()
		}
		return err
	}
}

func (lossAfter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
