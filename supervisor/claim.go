package supervisor

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/vigil-dev/vigil/health"
)

// share is what the claim step learned for the rebalance step.
type share struct {
	want    int  // this host's fair share
	others  bool // another live host has room below its share
	holding int  // slots this host holds and keeps
}

// claim takes free slots (no lease, or a lease of this host's earlier
// instance) up to this host's fair share, and adopts what it took. Slots
// nobody took for a whole tick are taken one more per tick.
//
// Which leases it reads keeps the control plane's cost proportional to
// the slots, not to slots × hosts (issue 14, P8). In steady state a tick
// reads only the free set (Keys.Free: slots released, or seen free by a
// scan and not taken), then the leases of its members. All of them are
// read (a scan) when slots may have come free unseen: at the first tick,
// when pool sizes change, after a data loss, when a host's record is gone
// or missed a renewal (its leases expire with it: the tick is armed for
// just after, see needScan), while the last scan saw leases about to
// expire or held by a host that is gone, and otherwise at random, once
// every three ticks across the cluster, as a safety net for a hint lost.
// The lease scripts decide: the free set is only where to look.
func (s *Supervisor) claim(ctx context.Context, ctl control, first bool) (share, error) {
	var all []health.ComponentID
	for _, p := range s.cfg.Pools {
		for slot := range s.cluster.sizes[p.Queue] {
			all = append(all, health.ComponentID{Queue: p.Queue, Slot: slot})
		}
	}
	want, others := s.fairShare(ctl.hosts, ctl.raw, len(all))
	p := share{want: want, others: others, holding: s.holding()}
	scan := s.needScan(ctl, first)
	if s.cluster.draining || len(all) == 0 {
		return p, nil
	}
	cand := all
	var gone []health.ComponentID // free-set members that are not free
	if !scan {
		hint, err := s.store.FreeSlots(ctx)
		if err != nil {
			return p, err
		}
		cand = nil
		for _, id := range hint {
			size, ours := s.cluster.sizes[id.Queue]
			switch {
			case !ours: // another host's pool: not ours to judge
			case id.Slot >= size || s.workers[id] != nil:
				gone = append(gone, id)
			default:
				cand = append(cand, id)
			}
		}
		slices.SortFunc(cand, func(a, b health.ComponentID) int {
			return cmp.Or(cmp.Compare(a.Queue, b.Queue), cmp.Compare(a.Slot, b.Slot))
		})
		if len(cand) == 0 {
			s.cluster.freeSeen = false
			return p, s.store.ForgetFree(ctx, gone)
		}
	}
	keys := s.store.Keys()
	lk := make([]string, len(cand))
	for i, id := range cand {
		lk[i] = keys.Slot(id)
	}
	holders, err := s.store.LeaseHolders(ctx, lk)
	if err != nil {
		return p, err
	}
	// The leases a scan watches expire: those of hosts gone, or whose
	// record missed a renewal (a live host renews its leases just before
	// its record, every tick).
	watched := make(map[string]bool, len(ctl.hosts))
	for _, h := range ctl.hosts {
		watched[h.ID] = !h.Alive || h.TTL > 0 && h.TTL < s.cfg.Lease/2
	}
	var free, foreign []int
	for i, h := range holders {
		switch {
		case h == "" || (h != s.cluster.me && strings.HasPrefix(h, s.cluster.takeover)):
			free = append(free, i)
		case h != s.cluster.me:
			if !scan {
				gone = append(gone, cand[i])
			} else if w, known := watched[health.LeaseHost(h)]; w || !known {
				foreign = append(foreign, i)
				s.cluster.scanNext = true // watch it expire
			}
		}
	}
	if scan && len(foreign) > 0 {
		expiring, err := s.watchExpiring(ctx, lk, foreign)
		if err != nil {
			return p, err
		}
		s.cluster.scanNext = s.cluster.scanNext || expiring
	}
	// Start at a host-specific offset so that hosts starting together
	// do not race for the same slots.
	off := int(hashString(s.cfg.Host) % uint32(max(1, len(free))))
	free = append(free[off:], free[:off]...)
	limit := want
	if s.cluster.freeSeen && !first && (s.cfg.Capacity == 0 || p.holding < s.cfg.Capacity) {
		limit = max(want, p.holding+1) // slots nobody took for a whole tick: take one more
	}
	// Claimed in rounds of one round trip, each for as many slots as
	// this host still wants (a slot taken meanwhile is refused) and can
	// adopt in what is left of a sixth of a lease, by what an adoption
	// took so far (a few, to measure, before the first); what it took is
	// adopted before the next round. The next tick follows at once when
	// slots were left for the budget: leases are renewed at a tick's
	// start, and a tick that adopted a thousand slots on a slow link or a
	// loaded machine outlasted a lease, the first ones lapsing.
	began, budget := time.Now(), s.cfg.Lease/6
	cut := false
	var left []health.ComponentID
	for len(free) > 0 {
		n := min(len(free), limit-p.holding)
		if n <= 0 {
			break
		}
		rest := budget - time.Since(began)
		if rest <= 0 {
			cut = true
			break
		}
		if s.cluster.adoptEach == 0 {
			n = min(n, 4)
		} else {
			n = min(n, max(1, int(rest/s.cluster.adoptEach)))
		}
		batch := free[:n]
		free = free[n:]
		bk := make([]string, n)
		for j, i := range batch {
			bk[j] = lk[i]
		}
		at := time.Now() // real time, as the leases' expiry
		ok, err := s.store.ClaimMany(ctx, bk, s.cluster.me, s.cluster.takeover, s.cfg.Lease)
		if err != nil {
			return p, err
		}
		var toAdopt []health.ComponentID
		for j, i := range batch {
			gone = append(gone, cand[i]) // taken, by this host or meanwhile by another
			if ok[j] && s.workers[cand[i]] == nil {
				toAdopt = append(toAdopt, cand[i])
				p.holding++
			}
		}
		if err := s.adoptTaken(ctx, toAdopt, at); err != nil {
			return p, err
		}
	}
	for _, i := range free {
		left = append(left, cand[i])
	}
	s.cluster.freeSeen = len(left) > 0 && !cut // left by this host's budget, not by every host
	if cut && len(left) > 0 {
		s.cluster.early = time.Millisecond
	}
	// What a scan saw free and nobody took is shown to the other hosts.
	if scan {
		if err := s.store.MarkFree(ctx, left); err != nil {
			return p, err
		}
	}
	if err := s.store.ForgetFree(ctx, gone); err != nil {
		return p, err
	}
	return p, nil
}

// adoptTaken adopts the slots a claim round took at at, and measures what
// one adoption takes (for the rounds' size).
func (s *Supervisor) adoptTaken(ctx context.Context, ids []health.ComponentID, at time.Time) error {
	if len(ids) == 0 {
		return nil
	}
	began := time.Now()
	recs, err := s.store.GetMany(ctx, ids)
	if err != nil {
		return err
	}
	for i, id := range ids {
		s.adopt(id, recs[i], at)
	}
	c := time.Since(began) / time.Duration(len(ids))
	if s.cluster.adoptEach == 0 {
		s.cluster.adoptEach = c
	} else {
		s.cluster.adoptEach = (3*s.cluster.adoptEach + c) / 4
	}
	return nil
}

// needScan reports whether this tick's claim reads every lease (see
// claim). A host whose record missed a renewal (less than half a lease
// left) has likely stopped: its leases, renewed just before its record,
// expire just before it, so the next tick is armed for just after and
// scans.
func (s *Supervisor) needScan(ctl control, first bool) bool {
	c := &s.cluster
	scan := first || c.scanNext
	c.scanNext = false
	if sig := sizesSignature(c.sizes); sig != c.scannedSizes {
		c.scannedSizes = sig
		scan = true
	}
	alive, live := make(map[string]bool, len(ctl.hosts)), 0
	for _, h := range ctl.hosts {
		if !h.Alive {
			continue
		}
		alive[h.ID] = true
		live++
		if h.ID != s.cfg.Host && h.TTL > 0 && h.TTL < s.cfg.Lease/2 {
			if d := h.TTL + 50*time.Millisecond; c.early == 0 || d < c.early {
				c.early = d
			}
			c.scanNext = true
		}
	}
	for id := range c.alive {
		if !alive[id] {
			scan = true // a host gone since the last tick
		}
	}
	c.alive = alive
	if !scan && s.cfg.Rand() < 1/float64(3*max(live, 1)) {
		scan = true
	}
	return scan
}

// sizesSignature is the canonical form of pool sizes.
func sizesSignature(sizes map[string]int) string {
	qs := slices.Sorted(maps.Keys(sizes))
	var b strings.Builder
	for _, q := range qs {
		b.WriteString(q + "=" + strconv.Itoa(sizes[q]) + ",")
	}
	return b.String()
}

// watchExpiring looks at the leases other hosts hold: a live holder renews
// every third of a lease, so a lease with less than half a lease left has
// missed a renewal — its host is likely gone. The next tick is then armed
// for just after it expires (and after the host's record, written a moment
// after its leases, does), so that the slot is taken over at once rather
// than up to a third of a lease later. It reports whether it saw one.
func (s *Supervisor) watchExpiring(ctx context.Context, keys []string, idx []int) (bool, error) {
	pipe := s.store.Client().Pipeline()
	cmds := make([]*redis.DurationCmd, len(idx))
	for j, i := range idx {
		cmds[j] = pipe.PTTL(ctx, keys[i])
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return false, fmt.Errorf("read lease expiries: %w", err)
	}
	seen := false
	for _, c := range cmds {
		if ttl := c.Val(); ttl > 0 && ttl < s.cfg.Lease/2 {
			seen = true
			d := ttl + 50*time.Millisecond
			if s.cluster.early == 0 || d < s.cluster.early {
				s.cluster.early = d
			}
		}
	}
	return seen, nil
}

// holding counts the slots this host holds and keeps.
func (s *Supervisor) holding() int {
	n := 0
	for _, w := range s.workers {
		if !w.leaving() {
			n++
		}
	}
	return n
}

// fairShare returns how many of total slots this host should hold, and
// whether another live host has room below its own share.
func (s *Supervisor) fairShare(hosts []health.Host, control map[string]string, total int) (want int, others bool) {
	type live struct{ slots, capacity int }
	var ls []live
	me := -1
	for _, h := range hosts {
		if !h.Alive || control[fieldDrainPrefix+h.ID] == "1" {
			continue
		}
		if h.ID == s.cfg.Host {
			me = len(ls)
		}
		ls = append(ls, live{h.Slots, h.Capacity})
	}
	if me < 0 && !s.cluster.draining {
		me = len(ls)
		ls = append(ls, live{s.holding(), s.cfg.Capacity})
	}
	if len(ls) == 0 {
		return 0, false
	}
	share := (total + len(ls) - 1) / len(ls)
	capped := func(c int) int {
		if c > 0 {
			return min(c, share)
		}
		return share
	}
	for i, l := range ls {
		if i != me && l.slots < capped(l.capacity) {
			others = true
		}
	}
	return capped(s.cfg.Capacity), others
}

func hashString(s string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(s))
	return h.Sum32()
}
