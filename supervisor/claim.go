package supervisor

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
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
// nobody took for a whole tick are taken one more per tick. It also
// watches leases about to expire (see watchExpiring).
func (s *Supervisor) claim(ctx context.Context, ctl control, first bool) (share, error) {
	var all []health.ComponentID
	for _, p := range s.cfg.Pools {
		for slot := range s.cluster.sizes[p.Queue] {
			all = append(all, health.ComponentID{Queue: p.Queue, Slot: slot})
		}
	}
	want, others := s.fairShare(ctl.hosts, ctl.raw, len(all))
	p := share{want: want, others: others, holding: s.holding()}
	if s.cluster.draining || len(all) == 0 {
		return p, nil
	}
	keys := s.store.Keys()
	lk := make([]string, len(all))
	for i, id := range all {
		lk[i] = keys.Slot(id)
	}
	holders, err := s.store.LeaseHolders(ctx, lk)
	if err != nil {
		return p, err
	}
	var free, foreign []int
	for i, h := range holders {
		switch {
		case h == "" || (h != s.cluster.me && strings.HasPrefix(h, s.cluster.takeover)):
			free = append(free, i)
		case h != s.cluster.me:
			foreign = append(foreign, i)
		}
	}
	if len(foreign) > 0 {
		if err := s.watchExpiring(ctx, lk, foreign); err != nil {
			return p, err
		}
	}
	// Start at a host-specific offset so that hosts starting together
	// do not race for the same slots.
	off := int(hashString(s.cfg.Host) % uint32(max(1, len(free))))
	free = append(free[off:], free[:off]...)
	limit := want
	if s.cluster.freeSeen && !first && (s.cfg.Capacity == 0 || p.holding < s.cfg.Capacity) {
		limit = p.holding + 1 // slots nobody took for a whole tick: take one more
	}
	var toAdopt []health.ComponentID
	var claimedAt []time.Time
	for _, i := range free {
		if p.holding >= limit {
			break
		}
		at := time.Now() // real time, as the lease's expiry
		ok, err := s.store.Claim(ctx, lk[i], s.cluster.me, s.cluster.takeover, s.cfg.Lease)
		if err != nil {
			return p, err
		}
		if ok && s.workers[all[i]] == nil {
			toAdopt = append(toAdopt, all[i])
			claimedAt = append(claimedAt, at)
			p.holding++
		}
	}
	s.cluster.freeSeen = len(free) > len(toAdopt)
	if len(toAdopt) > 0 {
		recs, err := s.store.GetMany(ctx, toAdopt)
		if err != nil {
			return p, err
		}
		for i, id := range toAdopt {
			s.adopt(id, recs[i], claimedAt[i])
		}
	}
	return p, nil
}

// watchExpiring looks at the leases other hosts hold: a live holder renews
// every third of a lease, so a lease with less than half a lease left has
// missed a renewal — its host is likely gone. The next tick is then armed
// for just after it expires (and after the host's record, written a moment
// after its leases, does), so that the slot is taken over at once rather
// than up to a third of a lease later.
func (s *Supervisor) watchExpiring(ctx context.Context, keys []string, idx []int) error {
	pipe := s.store.Client().Pipeline()
	cmds := make([]*redis.DurationCmd, len(idx))
	for j, i := range idx {
		cmds[j] = pipe.PTTL(ctx, keys[i])
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("read lease expiries: %w", err)
	}
	for _, c := range cmds {
		if ttl := c.Val(); ttl > 0 && ttl < s.cfg.Lease/2 {
			d := ttl + 50*time.Millisecond
			if s.cluster.early == 0 || d < s.cluster.early {
				s.cluster.early = d
			}
		}
	}
	return nil
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
