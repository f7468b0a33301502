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
// the slots, not to slots × hosts (BenchmarkControlPlane; the watcher
// rules: TestLateHostWatchedByOneHost, TestHostGoneUnwatchedIsScannedFor,
// TestLateHostWatchedForEachOfItsQueues). In steady state a tick
// reads only the free set (Keys.Free: slots released, or seen free by a
// scan and not taken), then the leases of its members. All of them are
// read (a scan) when slots may have come free unseen: at the first tick,
// when pool sizes change, after a data loss, by the one host that watches
// a host whose record missed a renewal, for each of its queues (it shows
// that host's slots free ahead of their expiry, see needScan), by every
// host of a queue when a host is gone that nobody watched for it, and
// otherwise at random, once every three ticks
// across the cluster, as a safety net for a hint lost. The lease scripts
// decide: the free set is only where to look.
//
// A scan that fails is made again at the next tick.
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
	p, err := s.claimFrom(ctx, ctl, all, p, scan, first)
	if err != nil && scan {
		s.cluster.scanNext = true
	}
	return p, err
}

// claimFrom is claim's reading and taking, of all (a scan) or of the free
// set's members among all.
func (s *Supervisor) claimFrom(ctx context.Context, ctl control, all []health.ComponentID, p share, scan, first bool) (share, error) {
	want := p.want
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
	// The leases watched expire: those of hosts gone, unknown, or whose
	// record missed a renewal. A scan puts them in the free set before
	// they expire (see needScan), and a read of the free set keeps them
	// there while their holder's record is not fresh (written within the
	// last third of a lease, as a live host does at every tick): a view of
	// the hosts read a moment before a watcher judged the holder late must
	// not drop its hint. Their expiry is no sign of life: a host renews its
	// leases at a tick's start and writes its record at its end, and one
	// that died in between leaves leases fresher than its record. Both arm
	// the next tick for just after the first of them expires.
	recLeft := make(map[string]time.Duration, len(ctl.hosts)) // of each host's record; -1: gone
	for _, h := range ctl.hosts {
		switch {
		case !h.Alive:
			recLeft[h.ID] = -1
		case h.TTL > 0:
			recLeft[h.ID] = h.TTL
		default:
			recLeft[h.ID] = s.cfg.Lease
		}
	}
	within := s.cfg.Lease / 2 // late
	if !scan {
		within = 2 * s.cfg.Lease / 3 // not fresh
	}
	var free, foreign []int
	for i, h := range holders {
		switch {
		case h == "" || (h != s.cluster.me && strings.HasPrefix(h, s.cluster.takeover)):
			free = append(free, i)
		case h != s.cluster.me:
			if t, known := recLeft[health.LeaseHost(h)]; !known || t < within {
				foreign = append(foreign, i)
			} else if !scan {
				gone = append(gone, cand[i])
			}
		}
	}
	var soon []health.ComponentID // watched leases about to expire: shown free ahead
	if len(foreign) > 0 {
		lasting, err := s.watchExpiring(ctx, lk, foreign)
		if err != nil {
			return p, err
		}
		for j, i := range foreign {
			switch {
			case !lasting[j] && scan:
				soon = append(soon, cand[i])
			case lasting[j] && !scan:
				gone = append(gone, cand[i])
			}
		}
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
	// start, and a tick that adopts a thousand slots on a slow link or a
	// loaded machine would outlast a lease, the first ones lapsing
	// (TestSlowAdoptionKeepsItsLeases).
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
	// What a scan saw free and nobody took, or about to be, is shown to
	// the other hosts.
	if scan {
		if err := s.store.MarkFree(ctx, append(left, soon...)); err != nil {
			return p, err
		}
		if err := s.noteWatched(ctx); err != nil {
			return p, err
		}
	}
	if err := s.store.ForgetFree(ctx, gone); err != nil {
		return p, err
	}
	return p, nil
}

// noteWatched writes, once a watcher's scan is done, which late hosts'
// records it watched (see needScan).
func (s *Supervisor) noteWatched(ctx context.Context) error {
	if len(s.cluster.watching) == 0 {
		return nil
	}
	if err := s.store.Client().HSet(ctx, s.store.Keys().Control(), s.cluster.watching).Err(); err != nil {
		return fmt.Errorf("note the hosts watched: %w", err)
	}
	s.cluster.watching = nil
	return nil
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
// claim).
//
// A host whose record missed a renewal (less than half a lease left, see
// late) has likely stopped: its leases, renewed just before its record,
// expire just before it. One host watches it, the watcher (see watches):
// it scans at once and puts the late host's slots in the free set ahead of
// their expiry. Every host arms its next tick for just after the late
// host's record expires; that tick reads the free set, where it finds them
// free. The watcher notes in the control hash which record it watched
// and the queues its scan read (fieldWatchedPrefix, watchNote): a scan
// reads this host's own pools' leases only, so a late host that runs
// queues no single host shares has one watcher per queue, each scanning
// until the note names its queues. A host gone with a queue of this
// host's left out of the note (its watcher failed too, a loss, an outage,
// two notes written at once) is scanned for by this host: a rare case,
// paid for once.
//
// Lateness is not judged while Redis has answered for less than a tick
// (every record is late after an outage, the hosts rewrite theirs at the
// tick right after) nor while this host's own record is late (it is the
// slow one).
func (s *Supervisor) needScan(ctl control, first bool) bool {
	c := &s.cluster
	scan := first || c.scanNext
	c.scanNext = false
	c.watching = nil
	if sig := sizesSignature(c.sizes); sig != c.scannedSizes {
		c.scannedSizes = sig
		scan = true
	}
	judge := s.cfg.Clock.Now().Sub(s.redis.answeringSince()) >= s.cfg.Lease/3
	for _, h := range ctl.hosts {
		if h.ID == s.cfg.Host && (!h.Alive || h.TTL > 0 && h.TTL < s.cfg.Lease/2) {
			judge = false
		}
	}
	alive, live := make(map[string][]string, len(ctl.hosts)), 0
	for _, h := range ctl.hosts {
		if !h.Alive {
			// Gone since the last tick, whose record listed the queues it
			// ran (a host that ran none of this host's held none of the
			// leases its scan reads).
			queues, was := c.alive[h.ID]
			if !was || ctl.raw[fieldLostPrefix+h.ID] == "stopped" {
				continue
			}
			if sh := s.shared(queues); len(sh) > 0 && !watched(ctl, h.ID, h.SeenAt, sh) {
				scan = true // nobody watched it for a queue of this host's
			}
			continue
		}
		alive[h.ID] = h.Queues
		live++
		if !judge || !s.late(h) {
			continue
		}
		if d := h.TTL + 50*time.Millisecond; c.early == 0 || d < c.early {
			c.early = d
		}
		if shared := s.shared(h.Queues); !watched(ctl, h.ID, h.SeenAt, shared) && s.watches(ctl, h) {
			scan = true
			if c.watching == nil {
				c.watching = map[string]string{}
			}
			f := fieldWatchedPrefix + h.ID
			c.watching[f] = watchNote(ctl.raw[f], h.SeenAt, shared, h.Queues)
		}
	}
	for id := range c.alive {
		if !slices.ContainsFunc(ctl.hosts, func(h health.Host) bool { return h.ID == id }) {
			scan = true // a host gone from the list since the last tick (a loss)
		}
	}
	c.alive = alive
	if !scan && s.cfg.Rand() < 1/float64(3*max(live, 1)) {
		scan = true
	}
	if scan {
		s.scans.Add(1)
	}
	return scan
}

// late reports whether h is another live host whose record missed a
// renewal: a live host writes it every third of a lease.
func (s *Supervisor) late(h health.Host) bool {
	return h.ID != s.cfg.Host && h.Alive && h.TTL > 0 && h.TTL < s.cfg.Lease/2
}

// A watched note (the control hash's fieldWatchedPrefix+host) is the
// seen_at (ms) of the late host's record that its watchers scanned for,
// alone when their scans read the leases of every queue it runs, else
// followed by "|" and the queues whose leases they read, comma separated.
// In a cluster whose hosts run the same pools the one watcher covers every
// queue, and the note is the seen_at alone, as an earlier version wrote
// it (and reads it: exactly).

// watchNote is the note to write once this host's scan for a late host
// whose record has seen_at seen and lists queues is done: the note read
// (old) if it is for the same record, with the queues this scan read
// (shared) added. Two watchers writing at once may lose one's queues: if
// the late host is still late at that one's next tick, it scans again;
// if it is gone by then, every host running the queues lost scans once.
func watchNote(old string, seen time.Time, shared, queues []string) string {
	at := strconv.FormatInt(seen.UnixMilli(), 10)
	var covered []string
	if oldAt, list, ok := strings.Cut(old, "|"); ok && oldAt == at && list != "" {
		covered = strings.Split(list, ",")
	}
	for _, q := range shared {
		if !slices.Contains(covered, q) {
			covered = append(covered, q)
		}
	}
	if len(queues) > 0 && covers(covered, queues) {
		return at
	}
	slices.Sort(covered)
	return at + "|" + strings.Join(covered, ",")
}

// noteFor reports whether a watched note is for the record of seen_at seen.
func noteFor(note string, seen time.Time) bool {
	at, _, _ := strings.Cut(note, "|")
	return at == strconv.FormatInt(seen.UnixMilli(), 10)
}

// watched reports whether watchers noted host id's record of seen_at seen
// as watched (its leases put in the free set) for every queue of queues.
func watched(ctl control, id string, seen time.Time, queues []string) bool {
	v, ok := ctl.raw[fieldWatchedPrefix+id]
	if !ok || !noteFor(v, seen) {
		return false
	}
	_, covered, scoped := strings.Cut(v, "|")
	return !scoped || covers(strings.Split(covered, ","), queues)
}

// covers reports whether every queue of queues is in covered.
func covers(covered, queues []string) bool {
	return !slices.ContainsFunc(queues, func(q string) bool { return !slices.Contains(covered, q) })
}

// shared lists this host's queues that a host whose record lists queues
// runs too: every one of this host's when the list is empty (a record of
// an earlier version).
func (s *Supervisor) shared(queues []string) []string {
	var out []string
	for q := range s.cluster.sizes {
		if len(queues) == 0 || slices.Contains(queues, q) {
			out = append(out, q)
		}
	}
	slices.Sort(out)
	return out
}

// watches reports whether this host watches the late host x (see
// needScan): for one of the queues both run (any of this host's, if x's
// record does not list them: an older version), the leader among the
// hosts that run that queue, are alive, not late and not draining, or else
// the lowest-id such host; this host when there is none.
func (s *Supervisor) watches(ctl control, x health.Host) bool {
	if s.cluster.draining {
		return false // it claims nothing
	}
	for q := range s.cluster.sizes {
		if len(x.Queues) > 0 && !slices.Contains(x.Queues, q) {
			continue
		}
		leader, first := "", s.cfg.Host
		if s.cluster.leader {
			leader = s.cfg.Host
		}
		for _, h := range ctl.hosts {
			if h.ID == s.cfg.Host || !h.Alive || s.late(h) || ctl.raw[fieldDrainPrefix+h.ID] == "1" ||
				!slices.Contains(h.Queues, q) {
				continue
			}
			if h.Leader && (leader == "" || h.ID < leader) {
				leader = h.ID
			}
			first = min(first, h.ID)
		}
		if cmp.Or(leader, first) == s.cfg.Host {
			return true
		}
	}
	return false
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

// watchExpiring reads the expiry of the leases at keys[idx], held by hosts
// watched (see claim), and arms the next tick for just after the first of
// them expires, so that its slot is taken over at once rather than up to
// a third of a lease later. It reports, for each, whether it lasts: a key
// without an expiry is no lease Vigil wrote.
func (s *Supervisor) watchExpiring(ctx context.Context, keys []string, idx []int) ([]bool, error) {
	pipe := s.store.Client().Pipeline()
	cmds := make([]*redis.DurationCmd, len(idx))
	for j, i := range idx {
		cmds[j] = pipe.PTTL(ctx, keys[i])
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("read lease expiries: %w", err)
	}
	lasting := make([]bool, len(idx))
	for j, c := range cmds {
		ttl := c.Val()
		switch {
		case ttl == -1: // PTTL's "no expiry"
			lasting[j] = true
			continue
		case ttl < 0: // gone since it was read
			ttl = 0
		}
		if d := ttl + 50*time.Millisecond; s.cluster.early == 0 || d < s.cluster.early {
			s.cluster.early = d
		}
	}
	return lasting, nil
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
