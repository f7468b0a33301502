package health_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/health"
)

// The owner of tag0 in these tests, and another host.
var (
	ownerA = health.LeaseValue("box-1", "i1") // record() writes host box-1, instance i1
	ownerB = health.LeaseValue("box-2", "i2")
)

func setLease(tb testing.TB, s *health.Store, v string) {
	tb.Helper()
	if err := s.Client().Set(context.Background(), s.Keys().Slot(tag0), v, time.Minute).Err(); err != nil {
		tb.Fatal(err)
	}
}

// Record writes check the writer owns the slot (issue 12, defect 1 and
// invariant 3): the lease names it, or the lease is gone and the record
// names no other instance.
func TestWriteChecksTheOwner(t *testing.T) {
	noInstance := record(tag0, health.StatusHealthy, 100)
	noInstance.Instance = ""
	tests := []struct {
		name   string
		lease  string            // "" = no lease
		stored *health.Component // nil = no record
		writer string
		ok     bool
	}{
		{"lease is the writer's", ownerA, new(record(tag0, health.StatusHealthy, 100)), ownerA, true},
		{"lease is the writer's, record another's", ownerB, new(record(tag0, health.StatusHealthy, 100)), ownerB, true},
		{"lease is another's", ownerB, new(record(tag0, health.StatusHealthy, 100)), ownerA, false},
		{"lease is another's, no record", ownerB, nil, ownerA, false},
		{"no lease, record the writer's", "", new(record(tag0, health.StatusHealthy, 100)), ownerA, true},
		{"no lease, record another's", "", new(record(tag0, health.StatusHealthy, 100)), ownerB, false},
		{"no lease, no record", "", nil, ownerB, true},
		{"no lease, record without instance", "", &noInstance, ownerB, true},
		{"no owner given", ownerB, new(record(tag0, health.StatusHealthy, 100)), "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, _ := newStore(t)
			if tt.lease != "" {
				setLease(t, s, tt.lease)
			}
			if tt.stored != nil {
				seed(t, s, *tt.stored)
			}
			before := dump(t, s)
			next := record(tag0, health.StatusCrashed, 200)
			_, err := s.Write(testCtx(t), next, health.Write{NoCheck: true, Restarts: true, Owner: tt.writer})
			if tt.ok {
				if err != nil {
					t.Fatalf("Write: %v", err)
				}
				if h := hash(t, s, s.Keys().Component(tag0)); h[health.FieldStatus] != "crashed" {
					t.Errorf("stored %v", h)
				}
				return
			}
			var oe *health.OwnerError
			if !errors.As(err, &oe) || !errors.Is(err, health.ErrNotOwner) {
				t.Fatalf("Write = %v, want an *OwnerError", err)
			}
			if oe.Holder == "" || oe.Holder == tt.writer {
				t.Errorf("holder %q", oe.Holder)
			}
			if d := diffDumps(before, dump(t, s)); len(d) > 0 {
				t.Errorf("a refused write wrote:\n%v", d)
			}
		})
	}
}

func TestSetPID(t *testing.T) {
	tests := []struct {
		name   string
		lease  string
		stored *health.Component
		owner  string
		want   error // nil: recorded
	}{
		{"owner, no pid yet", ownerA, new(record(tag0, health.StatusStarting, 0)), ownerA, nil},
		{"owner, same pid", ownerA, new(record(tag0, health.StatusStarting, 4200)), ownerA, nil},
		{"owner, another pid", ownerA, new(record(tag0, health.StatusStarting, 4100)), ownerA, health.ErrPIDTaken},
		{"lease another's", ownerB, new(record(tag0, health.StatusStarting, 0)), ownerA, health.ErrNotOwner},
		{"no lease, record another's", "", new(record(tag0, health.StatusStarting, 0)), ownerB, health.ErrNotOwner},
		{"no record", ownerA, nil, ownerA, health.ErrNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, _ := newStore(t)
			if tt.lease != "" {
				setLease(t, s, tt.lease)
			}
			if tt.stored != nil {
				seed(t, s, *tt.stored)
			}
			before := dump(t, s)
			err := s.SetPID(testCtx(t), record(tag0, health.StatusStarting, 4200), tt.owner)
			if tt.want == nil {
				if err != nil {
					t.Fatalf("SetPID: %v", err)
				}
				if h := hash(t, s, s.Keys().Component(tag0)); h[health.FieldPID] != "4200" {
					t.Errorf("stored %v", h)
				}
				if len(events(t, s)) != 1 {
					t.Error("no event for the recorded pid")
				}
				return
			}
			if !errors.Is(err, tt.want) {
				t.Fatalf("SetPID = %v, want %v", err, tt.want)
			}
			if d := diffDumps(before, dump(t, s)); len(d) > 0 {
				t.Errorf("a refused SetPID wrote:\n%v", d)
			}
		})
	}
}

// A record a worker's heartbeat re-created after Redis lost its data names
// no instance: no supervisor wrote its status, so an owner's write is not
// checked against the status machine (fault explorer E27: an operator
// restart whose stop and spawn were refused from that "healthy" left the
// slot stopped for good). A write without an owner, or over the owner's
// own record, is still checked.
func TestOwnerWritesOverARecordTheHeartbeatRecreated(t *testing.T) {
	steps := []struct {
		status health.Status
		actor  health.Actor
	}{
		{health.StatusStopped, health.ActorMonitor},   // the stopped process's exit: healthy → stopped is not the monitor's
		{health.StatusStarting, health.ActorOperator}, // the restart's spawn: healthy → starting is not the operator's
	}
	for _, st := range steps {
		t.Run(string(st.status), func(t *testing.T) {
			s, _ := newStore(t)
			hb, _ := newHeartbeater(t, s)
			if res, err := hb.Beat(testCtx(t)); err != nil || res != health.BeatRecreated {
				t.Fatalf("Beat = %v, %v; want BeatRecreated", res, err)
			}
			next := record(tag0, st.status, beatPID)
			if _, err := s.Write(testCtx(t), next, health.Write{Actor: st.actor}); !errors.Is(err, health.ErrTransition) {
				t.Fatalf("write without an owner: %v, want refused by the status machine", err)
			}
			if _, err := s.Write(testCtx(t), next, health.Write{Actor: st.actor, Owner: ownerA}); err != nil {
				t.Fatalf("owner's write over the re-created record: %v", err)
			}
			h := hash(t, s, s.Keys().Component(tag0))
			if h[health.FieldStatus] != string(st.status) || h[health.FieldInstance] != "i1" {
				t.Errorf("stored %v", h)
			}
			// Now a supervisor's record: the status machine guards it again.
			back := record(tag0, health.StatusHealthy, beatPID)
			if _, err := s.Write(testCtx(t), back, health.Write{Actor: health.ActorOperator, Owner: ownerA}); !errors.Is(err, health.ErrTransition) {
				t.Errorf("operator's %s → healthy over the owner's record: %v, want refused", st.status, err)
			}
		})
	}
}

// A record a previous owner left (another instance's: this owner's
// takeover write was held during an outage and never replaced it) is not
// checked against the status machine for the lease holder's write (fault
// explorer E28: the restart after a backoff was refused from that
// "healthy" and the slot never ran again). Without the lease, the owner
// check refuses it, as before.
func TestOwnerWritesOverAPreviousOwnersRecord(t *testing.T) {
	s, _ := newStore(t)
	old := record(tag0, health.StatusHealthy, 100)
	old.Host, old.Instance = "box-2", "i0"
	seed(t, s, old)
	next := record(tag0, health.StatusStarting, 0) // box-1/i1: ownerA
	if _, err := s.Write(testCtx(t), next, health.Write{Actor: health.ActorMonitor, Owner: ownerA}); !errors.Is(err, health.ErrNotOwner) {
		t.Fatalf("write with no lease over another instance's record: %v, want refused by the owner check", err)
	}
	setLease(t, s, ownerA)
	if _, err := s.Write(testCtx(t), next, health.Write{Actor: health.ActorMonitor}); !errors.Is(err, health.ErrTransition) {
		t.Fatalf("write without an owner: %v, want refused by the status machine", err)
	}
	if _, err := s.Write(testCtx(t), next, health.Write{Actor: health.ActorMonitor, Owner: ownerA}); err != nil {
		t.Fatalf("the lease holder's write over a previous owner's record: %v", err)
	}
	h := hash(t, s, s.Keys().Component(tag0))
	if h[health.FieldStatus] != "starting" || h[health.FieldHost] != "box-1" || h[health.FieldInstance] != "i1" {
		t.Errorf("stored %v", h)
	}
}

// Stopped and held, or failed: only an operator's action ends those,
// whoever wrote them. The lease holder's own (monitor's) write over
// another instance's hold or failure is refused by the status machine,
// as over its own; the operator's restart goes through. A host that took
// a lapsed lease again has a view older than a hold the slot's holder
// wrote meanwhile (the E28 fix let its restart after a backoff start the
// worker out of that hold).
func TestOwnerDoesNotWriteOverAnotherInstancesHoldOrFailure(t *testing.T) {
	for _, tc := range []struct {
		status health.Status
		held   bool
	}{{health.StatusStopped, true}, {health.StatusFailed, false}} {
		t.Run(string(tc.status), func(t *testing.T) {
			s, _ := newStore(t)
			other := record(tag0, tc.status, 100)
			other.Host, other.Instance, other.Held = "box-2", "i0", tc.held
			seed(t, s, other)
			setLease(t, s, ownerA)
			for _, st := range []health.Status{health.StatusStarting, health.StatusCrashed} {
				next := record(tag0, st, 0) // box-1/i1: ownerA
				if _, err := s.Write(testCtx(t), next, health.Write{Actor: health.ActorMonitor, Owner: ownerA}); !errors.Is(err, health.ErrTransition) {
					t.Errorf("monitor's %s over another instance's %s (held %v): %v, want refused by the status machine", st, tc.status, tc.held, err)
				}
			}
			h := hash(t, s, s.Keys().Component(tag0))
			if h[health.FieldStatus] != string(tc.status) || h[health.FieldInstance] != "i0" {
				t.Errorf("stored %v", h)
			}
			next := record(tag0, health.StatusStarting, 0)
			if _, err := s.Write(testCtx(t), next, health.Write{Actor: health.ActorOperator, Owner: ownerA}); err != nil {
				t.Errorf("operator's restart over another instance's %s: %v", tc.status, err)
			}
		})
	}
}
