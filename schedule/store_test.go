package schedule_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/schedule"
)

func TestCreateRefuses(t *testing.T) {
	e := newEnv(t)
	e.create("taken", "@hourly", "")
	big := json.RawMessage(`"` + strings.Repeat("x", schedule.MaxPayloadDefault) + `"`)
	tests := []struct {
		name  string
		d     func(*schedule.Definition)
		field string
		is    error
	}{
		{"invalid spec", func(d *schedule.Definition) { d.Spec = "61 * * * *" }, "spec", schedule.ErrInvalid},
		{"invalid zone", func(d *schedule.Definition) { d.Spec = "CRON_TZ=Moon/Base 0 * * * *" }, "spec", schedule.ErrInvalid},
		{"too fast", func(d *schedule.Definition) { d.Spec = "@every 200ms" }, "spec", schedule.ErrInvalid},
		{"never ticks", func(d *schedule.Definition) { d.Spec = "0 0 30 2 *" }, "spec", schedule.ErrInvalid},
		{"unknown queue", func(d *schedule.Definition) { d.Queue = "nope" }, "queue", schedule.ErrUnknownQueue},
		{"queue with a brace", func(d *schedule.Definition) { d.Queue = "a}b" }, "queue", schedule.ErrInvalid},
		{"payload over the limit", func(d *schedule.Definition) { d.Payload = big }, "payload", schedule.ErrInvalid},
		{"payload not JSON", func(d *schedule.Definition) { d.Payload = json.RawMessage(`{`) }, "payload", schedule.ErrInvalid},
		{"duplicate name", func(d *schedule.Definition) { d.Name = "taken" }, "name", schedule.ErrExists},
		{"bad name", func(d *schedule.Definition) { d.Name = "../x" }, "name", schedule.ErrInvalid},
		{"no type", func(d *schedule.Definition) { d.Type = "" }, "type", schedule.ErrInvalid},
		{"bad policy", func(d *schedule.Definition) { d.CatchUp = "some" }, "catch_up", schedule.ErrInvalid},
		{"negative retry", func(d *schedule.Definition) { d.MaxRetry = new(-1) }, "max_retry", schedule.ErrInvalid},
		{"sub-second unique", func(d *schedule.Definition) { d.Unique = time.Millisecond }, "unique", schedule.ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := schedule.Definition{Name: "fresh", Spec: "@hourly", Queue: e.q, Type: "report"}
			tt.d(&d)
			_, err := e.store.Create(e.ctx(), d)
			var fe *schedule.FieldError
			if !errors.As(err, &fe) || fe.Field != tt.field || !errors.Is(err, tt.is) {
				t.Fatalf("Create = %v; want a FieldError on %s wrapping %v", err, tt.field, tt.is)
			}
		})
	}
	if vs, _ := e.store.List(e.ctx()); len(vs) != 1 {
		t.Errorf("refused schedules were stored: %v", vs)
	}
	// With the setting, a sub-second schedule is fine.
	s := schedule.NewStore(e.hs, schedule.StoreConfig{Queues: []string{e.q}, Clock: e.clock, Settings: schedule.Settings{AllowSubsecond: true}})
	if _, err := s.Create(e.ctx(), schedule.Definition{Name: "fast", Spec: "@every 200ms", Queue: e.q, Type: "t"}); err != nil {
		t.Errorf("sub-second with allow_subsecond: %v", err)
	}
}

func TestStoreLifecycle(t *testing.T) {
	e := newEnv(t)
	v := e.create("s", "@every 1m", "")
	if v.CatchUp != schedule.CatchUpLast || v.Source != schedule.SourceAPI || v.Rev != 1 || !v.Since.Equal(t0) || !v.Next.Equal(t0.Add(time.Minute)) {
		t.Fatalf("created %+v", v)
	}
	id, v, err := e.store.Trigger(e.ctx(), "s")
	if err != nil || !strings.HasPrefix(id, "sched.s.manual.") || v.LastTask != id || v.Fires != 1 || !v.LastTick.IsZero() {
		t.Fatalf("trigger: %q %+v %v", id, v, err)
	}
	if got := e.pending(); !same(got, []string{id}) {
		t.Errorf("pending %v", got)
	}
	if f := e.events(schedule.EventFired); len(f) != 1 || f[0]["manual"] != true || f[0]["task_id"] != id {
		t.Errorf("trigger event %v", f)
	}
	d := v.Definition
	d.Spec = "@every 2m"
	e.at(30 * time.Second)
	v, err = e.store.Update(e.ctx(), "s", d)
	if err != nil || v.Rev != 2 || !v.Since.Equal(t0.Add(30*time.Second)) || !v.Next.Equal(t0.Add(2*time.Minute)) {
		t.Fatalf("updated %+v, %v", v, err)
	}
	if _, err := e.store.Update(e.ctx(), "s", schedule.Definition{Name: "other", Spec: "@hourly", Queue: e.q, Type: "t"}); err == nil {
		t.Error("renamed by an update")
	}
	if err := e.store.Delete(e.ctx(), "s"); err != nil {
		t.Fatal(err)
	}
	for _, err := range []error{e.store.Delete(e.ctx(), "s"), func() error { _, err := e.store.Get(e.ctx(), "s"); return err }(),
		func() error { _, _, err := e.store.Trigger(e.ctx(), "s"); return err }()} {
		if !errors.Is(err, schedule.ErrNotFound) {
			t.Errorf("after delete: %v", err)
		}
	}
	// The name is free again.
	e.create("s", "@hourly", "")
}

// Configured schedules are applied by the first host with a new set, not
// by every host that starts with the same one (API changes since stand).
func TestApplyConfig(t *testing.T) {
	e := newEnv(t)
	conf := []schedule.Definition{
		{Name: "nightly", Spec: "0 2 * * *", Queue: e.q, Type: "report"},
		{Name: "hourly", Spec: "@hourly", Queue: e.q, Type: "sweep"},
	}
	if ok, err := e.store.ApplyConfig(e.ctx(), conf); err != nil || !ok {
		t.Fatalf("first apply: %v, %v", ok, err)
	}
	if _, _, err := e.store.SetPaused(e.ctx(), "hourly", true); err != nil {
		t.Fatal(err)
	}
	e.create("adhoc", "@daily", "")
	if ok, err := e.store.ApplyConfig(e.ctx(), conf); err != nil || ok {
		t.Fatalf("same set again: %v, %v", ok, err)
	}
	// A new set: nightly changes, hourly goes, weekly comes; the API's
	// schedule stays.
	conf2 := []schedule.Definition{
		{Name: "nightly", Spec: "0 3 * * *", Queue: e.q, Type: "report"},
		{Name: "weekly", Spec: "@weekly", Queue: e.q, Type: "report"},
	}
	if ok, err := e.store.ApplyConfig(e.ctx(), conf2); err != nil || !ok {
		t.Fatalf("new set: %v, %v", ok, err)
	}
	vs, _ := e.store.List(e.ctx())
	var names []string
	for _, v := range vs {
		names = append(names, v.Name+"="+v.Spec+"/"+v.Source)
	}
	if got := strings.Join(names, " "); got != "adhoc=@daily/api nightly=0 3 * * */config weekly=@weekly/config" {
		t.Errorf("schedules %s", got)
	}
	bad := []schedule.Definition{{Name: "x", Spec: "@every 1ms", Queue: e.q, Type: "t"}}
	if _, err := e.store.ApplyConfig(e.ctx(), bad); err == nil || !strings.Contains(err.Error(), "schedules[0]") {
		t.Errorf("bad config applied: %v", err)
	}
}

// With the unique option, a tick whose previous task still holds asynq's
// uniqueness lock is decided and enqueues nothing.
func TestUniqueTick(t *testing.T) {
	e := newEnv(t)
	e.create("u", "@every 1s", schedule.CatchUpAll, func(d *schedule.Definition) { d.Unique = time.Hour })
	a := e.scheduler("a", true)
	for i := 1; i <= 2; i++ {
		e.at(time.Duration(i)*time.Second + time.Millisecond)
		a.Step(e.ctx())
	}
	if got, want := e.tasks(), tickIDs("u", time.Second); !same(got, want) {
		t.Fatalf("tasks %v, want %v", got, want)
	}
	f := e.events(schedule.EventFired)
	if len(f) != 2 || f[1]["result"] != "duplicate" {
		t.Errorf("events %v", f)
	}
	if v := e.view("u"); !v.LastTick.Equal(t0.Add(2*time.Second)) || v.Skipped != 1 {
		t.Errorf("view %+v", v)
	}
}
