package explore

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/vigil-dev/vigil/health"
)

// Tolerances of the continuous checks. A host that lost Redis (or was
// down) fences its workers only once it is back: a probe, a tick, a stop.
const (
	// fenceGrace: after a disturbance of a host ends, how long its
	// processes and records may still disagree with the leases.
	fenceGrace = 5 * time.Second
	// handover: how long a live worker's host may not hold its slot's
	// lease, or a record name another instance than the lease holder,
	// with no disturbance: a tick, a graceful stop, a tick.
	handover = Lease/3 + 5*OpTimeout + StopTimeout + time.Second
	// orphanLimit: a worker whose supervisor died is gone after
	// VIGIL_SHUTDOWN_TIMEOUT (stop_timeout − 1 s) + 1 s; sampling adds
	// a little.
	orphanLimit = StopTimeout + time.Second + 2*SampleEvery + 200*time.Millisecond
)

// snapshot is one look at the seed's processes and Redis.
type snapshot struct {
	at       time.Time
	sup      map[string][]proc // host id → its live workers
	orphans  []proc            // workers whose supervisor is gone
	redisOK  bool
	leases   map[string]string // component → lease value ("" free)
	records  map[string]record
	hbLeft   map[string]time.Duration // component → its heartbeat key's PTTL (-2: no key)
	hostPIDs map[int]string
}

type record struct {
	status, host, instance string
	pid                    string
}

// orphans lists the seed's worker processes that are children of the
// explorer (the subreaper): their supervisor died.
func (w *world) orphans() []proc {
	var out []proc
	for _, pid := range w.kids.children(os.Getpid()) {
		p, ok := w.procs.read(pid)
		if !ok {
			continue
		}
		if p.state == 'Z' && p.comp == "" {
			continue // not known as ours: not ours to reap
		}
		if p.prefix == w.pfx {
			out = append(out, p)
		}
	}
	return out
}

// look takes a snapshot.
func (w *world) look(withRedis bool) snapshot {
	s := snapshot{at: time.Now(), sup: map[string][]proc{}, hostPIDs: map[int]string{}}
	for _, h := range w.hosts {
		for _, p := range h.processes() {
			s.hostPIDs[p.pid] = h.id
			for _, c := range w.kids.children(p.pid) {
				if wp, ok := w.procs.read(c); ok && wp.alive() && wp.prefix == w.pfx {
					s.sup[h.id] = append(s.sup[h.id], wp)
				}
			}
		}
	}
	for _, o := range w.orphans() {
		if o.alive() {
			s.orphans = append(s.orphans, o)
		} else {
			reap(o.pid)
		}
	}
	if withRedis {
		s.leases, s.records, s.hbLeft, s.redisOK = w.readRedis()
	}
	return s
}

// readRedis reads every slot's lease, record and heartbeat key's PTTL in
// one round trip.
func (w *world) readRedis() (map[string]string, map[string]record, map[string]time.Duration, bool) {
	ids := w.allSlots()
	keys := w.store.Keys()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	pipe := w.rdb.Pipeline()
	gets := make([]*redis.StringCmd, len(ids))
	hms := make([]*redis.SliceCmd, len(ids))
	ttls := make([]*redis.DurationCmd, len(ids))
	for i, id := range ids {
		gets[i] = pipe.Get(ctx, keys.Slot(id))
		hms[i] = pipe.HMGet(ctx, keys.Component(id), health.FieldStatus, health.FieldHost, health.FieldInstance, health.FieldPID)
		ttls[i] = pipe.PTTL(ctx, keys.Heartbeat(id))
	}
	if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
		return nil, nil, nil, false
	}
	leases, recs, left := map[string]string{}, map[string]record{}, map[string]time.Duration{}
	for i, id := range ids {
		leases[id.String()] = gets[i].Val()
		left[id.String()] = ttls[i].Val()
		v := hms[i].Val()
		str := func(k int) string {
			if k < len(v) {
				if s, ok := v[k].(string); ok {
					return s
				}
			}
			return ""
		}
		recs[id.String()] = record{status: str(0), host: str(1), instance: str(2), pid: str(3)}
	}
	return leases, recs, left, true
}

// sampler checks invariants 1–3 every SampleEvery until stop closes.
func (w *world) sampler(stop <-chan struct{}) {
	since := map[string]time.Time{} // condition → first seen
	reported := map[string]bool{}
	watched := map[int]time.Time{} // worker pid → when the beat watchdog last looked at it
	tick := time.NewTicker(SampleEvery)
	defer tick.Stop()
	last, n := time.Now(), 0
	w.load.load(loadAvg())
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		w.load.late(time.Since(last) - SampleEvery)
		if n++; n%20 == 0 { // once a second
			w.load.load(loadAvg())
		}
		began := time.Now()
		s := w.look(true)
		if took := time.Since(began); !w.b.anyDisturbed(began.Add(-time.Second), time.Now()) {
			w.load.redis(took)
		}
		// Late is measured from the end of this look: a read that Redis
		// held (a frozen master, a Sentinel client waiting for the new
		// master) is Redis's doing, not the machine's.
		last = time.Now()
		w.remember(s)
		now := s.at
		seen := map[string]bool{}
		persist := func(key string, limit time.Duration) (time.Time, bool) {
			seen[key] = true
			first, ok := since[key]
			if !ok {
				since[key] = now
				first = now
			}
			return first, now.Sub(first) > limit && !reported[key]
		}
		report := func(key string, inv int, format string, args ...any) {
			reported[key] = true
			w.violate(inv, format, args...)
		}

		// 1: two live supervised processes of one slot, both on hosts
		// that reach Redis.
		bySlot := map[string][]proc{}
		for _, ps := range s.sup {
			for _, p := range ps {
				bySlot[p.comp] = append(bySlot[p.comp], p)
			}
		}
		for comp, ps := range bySlot {
			if len(ps) < 2 {
				continue
			}
			var calm []proc
			for _, p := range ps {
				if !w.b.excuses(p.host, w.bornAt(p), now, fenceGrace) {
					calm = append(calm, p)
				}
			}
			if len(calm) < 2 {
				continue
			}
			key := "1 " + comp + " " + pidList(calm)
			if first, due := persist(key, SampleEvery); due {
				report(key, 1, "%s runs in %d live processes %s for %s (lease %q, record %v)",
					comp, len(calm), describeProcs(calm), now.Sub(first).Round(time.Millisecond), s.leases[comp], s.records[comp])
			}
		}
		// 2: orphans outlive their supervisor by stop_timeout + 1 s at most.
		for _, o := range s.orphans {
			key := fmt.Sprintf("2o %d %d", o.pid, o.start)
			if first, due := persist(key, orphanLimit); due {
				report(key, 2, "orphan worker pid %d (%s of host %s, state %c) alive %s after its supervisor died",
					o.pid, o.comp, o.host, o.state, now.Sub(first).Round(time.Millisecond))
			}
		}
		if s.redisOK {
			// 2: a live worker's host holds its slot's lease.
			for hid, ps := range s.sup {
				for _, p := range ps {
					holder := s.leases[p.comp]
					if health.LeaseHost(holder) == hid {
						continue
					}
					key := fmt.Sprintf("2l %d %s", p.pid, holder)
					first, due := persist(key, handover)
					if due && !w.b.excuses(hid, w.bornAt(p), now, fenceGrace) && !w.b.disturbed(health.LeaseHost(holder), first, now, fenceGrace) {
						report(key, 2, "worker pid %d (%s, state %c) of host %s lives %s while the slot's lease is %q (record %v)",
							p.pid, p.comp, p.state, hid, now.Sub(first).Round(time.Millisecond), holder, s.records[p.comp])
					}
				}
			}
			w.watchBeats(s, watched)
			// 3: a running record names the lease holder.
			for comp, r := range s.records {
				holder := s.leases[comp]
				if holder == "" || r.status == "" || !health.Status(r.status).Running() && r.status != string(health.StatusCrashed) {
					continue
				}
				if health.LeaseValue(r.host, r.instance) == holder {
					continue
				}
				key := "3 " + comp + " " + holder + " " + r.host + "/" + r.instance
				first, due := persist(key, handover)
				if due && !w.b.disturbed(r.host, first, now, fenceGrace) && !w.b.disturbed(health.LeaseHost(holder), first, now, fenceGrace) {
					report(key, 3, "%s's record (%s, host %s instance %s pid %s) has named another than the lease holder %q for %s",
						comp, r.status, r.host, r.instance, r.pid, holder, now.Sub(first).Round(time.Millisecond))
				}
			}
		}
		for k := range since {
			if seen[k] {
				continue
			}
			if needsRedis := strings.HasPrefix(k, "2l") || strings.HasPrefix(k, "3"); needsRedis && !s.redisOK {
				continue // not looked at this time
			}
			delete(since, k)
		}
	}
}

// remember notes when each worker process was first seen.
func (w *world) remember(s snapshot) {
	w.mu.Lock()
	defer w.mu.Unlock()
	note := func(p proc) {
		k := [2]uint64{uint64(p.pid), p.start}
		if _, ok := w.born[k]; !ok {
			w.born[k] = s.at
		}
		w.lastSeen[p.pid] = s.at
	}
	for _, ps := range s.sup {
		for _, p := range ps {
			note(p)
		}
	}
	for _, p := range s.orphans {
		note(p)
	}
}

// bornAt is when p started (by /proc; btime has a second's resolution,
// so this may be up to a second early), else when it was first seen.
func (w *world) bornAt(p proc) time.Time {
	if t := p.started(); !t.IsZero() {
		return t
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if t, ok := w.born[[2]uint64{uint64(p.pid), p.start}]; ok {
		return t
	}
	return time.Now()
}

func pidList(ps []proc) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = fmt.Sprint(p.pid)
	}
	sort.Strings(s)
	return strings.Join(s, ",")
}

func describeProcs(ps []proc) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = fmt.Sprintf("pid %d on %s (state %c)", p.pid, p.host, p.state)
	}
	return strings.Join(s, ", ")
}

// watchBeats logs where a healthy worker's threads are when it has not
// beaten for half a TTL while nothing was disturbed for a TTL (Redis
// answering, no fault injected into it): a running worker killed as hung
// with no fault to explain it (a stall of the machine that freezes
// processes of one binary together) then leaves in the seed's log whether
// it sat in the kernel (D, with its stack), waited for a CPU (R) or slept
// in the Go runtime (S: a goroutine of its own held up). At most once per half a TTL per process.
func (w *world) watchBeats(s snapshot, watched map[int]time.Time) {
	if w.b.anyDisturbed(s.at.Add(-HBTTL), s.at) {
		return
	}
	for _, ps := range s.sup {
		for _, p := range ps {
			left, ok := s.hbLeft[p.comp]
			r := s.records[p.comp]
			switch {
			case !ok || left == -1 || left > HBTTL/2:
			case r.status != string(health.StatusHealthy) || r.pid != strconv.Itoa(p.pid):
			case w.b.wasFaulted(p.pid) || s.at.Sub(watched[p.pid]) < HBTTL/2:
			default:
				watched[p.pid] = s.at
				key := "expires in " + left.Round(time.Millisecond).String()
				if left < 0 {
					key = "gone"
				}
				w.b.logf("beat watchdog: %s pid %d on %s is healthy and has not beaten for half a TTL (key %s): %s; tasks in D: %s",
					p.comp, p.pid, p.host, key, procWhere(p.pid), blockedTasks(8))
			}
		}
	}
}
