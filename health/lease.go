package health

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Lease scripts (docs/design.md §11). A lease value is "<host>/<instance>".

// claimScript takes a lease that is free, already ours, or held by an
// earlier instance of our own host (which has been judged gone).
// KEYS: lease. ARGV: me, lease ms, takeover prefix ("<host>/" or "").
var claimScript = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if (not v) or v == ARGV[1] or (ARGV[3] ~= '' and string.sub(v, 1, #ARGV[3]) == ARGV[3]) then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
return 0
`)

// renewScript extends a lease that is still ours, or takes it again if it
// is gone (Redis came back empty, or it expired with nobody taking it):
// 1 held, 2 taken again, 0 lost to another holder. KEYS: lease. ARGV: me,
// lease ms.
var renewScript = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
if not v then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 2
end
return 0
`)

// releaseScript deletes a lease if it is ours: 1 deleted, 2 there was
// none (a release sent again after its reply was lost finds its own work
// done), 0 another holder's. KEYS: lease. ARGV: me.
var releaseScript = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then return redis.call('DEL', KEYS[1]) end
if not v then return 2 end
return 0
`)

// LeaseValue is the value of a lease held by instance of host.
func LeaseValue(host, instance string) string { return host + "/" + instance }

// LeaseHost returns the host part of a lease value.
func LeaseHost(v string) string { h, _, _ := strings.Cut(v, "/"); return h }

// Claim tries to take the lease at key for me; takeover is a prefix
// ("<host>/") of values it may take over as well ("" for none).
func (s *Store) Claim(ctx context.Context, key, me, takeover string, lease time.Duration) (bool, error) {
	n, err := claimScript.Run(ctx, s.rdb, []string{key}, me, lease.Milliseconds(), takeover).Int()
	if err != nil {
		return false, fmt.Errorf("claim %s: %w", key, err)
	}
	return n == 1, nil
}

// ClaimMany tries to take the leases at keys for me (see Claim), in one
// round trip; ok[i] reports the ones taken.
func (s *Store) ClaimMany(ctx context.Context, keys []string, me, takeover string, lease time.Duration) (ok []bool, err error) {
	if len(keys) == 0 {
		return nil, nil
	}
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.Cmd, len(keys))
	for i, k := range keys {
		cmds[i] = claimScript.EvalSha(ctx, pipe, []string{k}, me, lease.Milliseconds(), takeover)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		if !isNoScript(err) {
			return nil, fmt.Errorf("claim %d leases: %w", len(keys), err)
		}
		if err := claimScript.Load(ctx, s.rdb).Err(); err != nil {
			return nil, fmt.Errorf("load claim script: %w", err)
		}
		return s.ClaimMany(ctx, keys, me, takeover, lease)
	}
	ok = make([]bool, len(keys))
	for i, c := range cmds {
		n, _ := c.Int()
		ok[i] = n == 1
	}
	return ok, nil
}

// Renew extends the leases at keys that are still me's, in one round trip
// (one script call per key, pipelined, since on a Redis Cluster the keys
// live in different slots); lost[i] reports the ones that are not.
func (s *Store) Renew(ctx context.Context, keys []string, me string, lease time.Duration) (lost []bool, err error) {
	rs, err := s.RenewLeases(ctx, keys, me, lease)
	if err != nil {
		return nil, err
	}
	lost = make([]bool, len(rs))
	for i, r := range rs {
		lost[i] = r == LeaseLost
	}
	return lost, nil
}

// Renewal is what renewing one lease found.
type Renewal uint8

const (
	// LeaseHeld: still me's, extended.
	LeaseHeld Renewal = iota
	// LeaseRetaken: gone (it expired, or Redis lost it), taken again: it
	// was nobody's for a while, and may have been another's meanwhile.
	LeaseRetaken
	// LeaseLost: another holder's.
	LeaseLost
	// LeaseHeldUnsure: me's, extended, found so by a renewal sent again
	// after the one before it failed, which may have run unanswered (a
	// reply lost with its connection): that one may have found the lease
	// gone and taken it again (LeaseRetaken), which this one cannot tell.
	LeaseHeldUnsure
)

// renewResends is how often RenewLeases sends a renewal again after it
// failed: go-redis's default MaxRetries, which go-redis itself does not
// apply to a renewal (it is sent NoRetry).
const renewResends = 3

// RenewLeases is Renew reporting, for each lease, whether it was held,
// gone and taken again, lost, or held as found by a renewal sent again.
//
// A renewal that failed (but for a timeout: the error is returned) is sent
// again here, not by go-redis (it is sent NoRetry): one whose reply was
// lost may have run, found a lease gone (Redis lost its data) and taken it
// again, and the second, seeing it this host's, would answer "held". The
// loss would go unseen: the records Redis lost, a stopped worker's hold
// among them, would never be written again. What a renewal sent again
// finds held is LeaseHeldUnsure
// (TestRenewalSentAgainAfterALostReplyIsUnsure). A caller whose renewal
// returned an error knows as much of its next one.
func (s *Store) RenewLeases(ctx context.Context, keys []string, me string, lease time.Duration) ([]Renewal, error) {
	for n := 0; ; n++ {
		out, err := s.renewOnce(ctx, keys, me, lease)
		if err == nil {
			for i := range out {
				if n > 0 && out[i] == LeaseHeld { // sent again
					out[i] = LeaseHeldUnsure
				}
			}
			return out, nil
		}
		// Not sent again after a timeout: Redis is slow or away, which
		// the caller judges (it knows the renewal may have run).
		var ne net.Error
		if n == renewResends || ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout() {
			return nil, err
		}
		t := time.NewTimer(time.Duration(8<<n) * time.Millisecond) // go-redis's first backoffs
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, err
		case <-t.C:
		}
	}
}

// NoRetry makes go-redis send a command once, even in a pipeline (and the
// whole pipeline with it): after a lost reply the caller decides.
type NoRetry struct{ *redis.Cmd }

// NoRetry reports that go-redis must not send the command again.
func (NoRetry) NoRetry() bool { return true }

// renewOnce is one renewal of the leases at keys (see RenewLeases).
func (s *Store) renewOnce(ctx context.Context, keys []string, me string, lease time.Duration) ([]Renewal, error) {
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.Cmd, len(keys))
	for i, k := range keys {
		cmds[i] = redis.NewCmd(ctx, "evalsha", renewScript.Hash(), 1, k, me, lease.Milliseconds())
		_ = pipe.Process(ctx, NoRetry{cmds[i]})
	}
	if _, err := pipe.Exec(ctx); err != nil {
		if !isNoScript(err) {
			return nil, fmt.Errorf("renew %d leases: %w", len(keys), err)
		}
		if err := renewScript.Load(ctx, s.rdb).Err(); err != nil {
			return nil, fmt.Errorf("load renew script: %w", err)
		}
		return s.renewOnce(ctx, keys, me, lease)
	}
	out := make([]Renewal, len(keys))
	for i, c := range cmds {
		switch n, _ := c.Int(); n {
		case 1:
			out[i] = LeaseHeld
		case 2:
			out[i] = LeaseRetaken
		default:
			out[i] = LeaseLost
		}
	}
	return out, nil
}

// Release deletes the lease at key if it is me's.
func (s *Store) Release(ctx context.Context, key, me string) error {
	if err := releaseScript.Run(ctx, s.rdb, []string{key}, me).Err(); err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("release %s: %w", key, err)
	}
	return nil
}

// ReleaseSlot gives up the slot lease of id if it is me's, and adds id to
// the free set, so that the other hosts see it free at their next tick
// without reading every lease.
func (s *Store) ReleaseSlot(ctx context.Context, id ComponentID, me string) error {
	n, err := releaseScript.Run(ctx, s.rdb, []string{s.keys.Slot(id)}, me).Int()
	if err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("release %s: %w", id, err)
	}
	if n == 1 || n == 2 {
		// Gone is free as well: go-redis sends the release again when its
		// reply was lost, and that finds no lease; the slot must still be
		// in the free set, not wait for a scan
		// (TestReleaseSentAgainAfterALostReplyMarksTheSlotFree).
		return s.MarkFree(ctx, []ComponentID{id})
	}
	return nil
}

// MarkFree adds ids to the free set (see Keys.Free).
func (s *Store) MarkFree(ctx context.Context, ids []ComponentID) error {
	if len(ids) == 0 {
		return nil
	}
	ms := make([]any, len(ids))
	for i, id := range ids {
		ms[i] = id.String()
	}
	if err := s.rdb.SAdd(ctx, s.keys.Free(), ms...).Err(); err != nil {
		return fmt.Errorf("mark %d slots free: %w", len(ids), err)
	}
	return nil
}

// ForgetFree removes ids from the free set.
func (s *Store) ForgetFree(ctx context.Context, ids []ComponentID) error {
	if len(ids) == 0 {
		return nil
	}
	ms := make([]any, len(ids))
	for i, id := range ids {
		ms[i] = id.String()
	}
	if err := s.rdb.SRem(ctx, s.keys.Free(), ms...).Err(); err != nil {
		return fmt.Errorf("forget %d free slots: %w", len(ids), err)
	}
	return nil
}

// FreeSlots reads the free set. A member that is not a component id is
// removed (nothing Vigil writes; the set is a hint).
func (s *Store) FreeSlots(ctx context.Context) ([]ComponentID, error) {
	ms, err := s.rdb.SMembers(ctx, s.keys.Free()).Result()
	if err != nil {
		return nil, fmt.Errorf("read free slots: %w", err)
	}
	out := make([]ComponentID, 0, len(ms))
	for _, m := range ms {
		id, err := ParseComponentID(m)
		if err != nil {
			s.rdb.SRem(ctx, s.keys.Free(), m)
			continue
		}
		out = append(out, id)
	}
	return out, nil
}

// LeaseHolders reads the values of the leases at keys ("" when free).
func (s *Store) LeaseHolders(ctx context.Context, keys []string) ([]string, error) {
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.StringCmd, len(keys))
	for i, k := range keys {
		cmds[i] = pipe.Get(ctx, k)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("read %d leases: %w", len(keys), err)
	}
	out := make([]string, len(keys))
	for i, c := range cmds {
		out[i] = c.Val()
	}
	return out, nil
}

// Host is a host's record (docs/design.md §11).
type Host struct {
	ID       string `json:"id"`
	Instance string `json:"instance"`
	PID      int    `json:"pid"`
	Hostname string `json:"hostname"`
	Version  string `json:"version"`
	Address  string `json:"address"`
	Capacity int    `json:"capacity"`
	Slots    int    `json:"slots"`
	Draining bool   `json:"draining"`
	Leader   bool   `json:"leader"`
	// Queues are the queues whose pools the host runs (the claim step's
	// watcher of a late host is chosen among the hosts that run its
	// queues).
	Queues    []string  `json:"queues,omitempty"`
	StartedAt time.Time `json:"started_at"`
	SeenAt    time.Time `json:"seen_at"`
	Alive     bool      `json:"alive"`
	// TTL is what is left of the record's lease when it was read (0 when
	// gone): a live host renews it every third of a lease, so less than
	// half a lease left means it missed a renewal.
	TTL time.Duration `json:"-"`
}

func (h Host) fields() map[string]string {
	return map[string]string{
		"id": h.ID, "instance": h.Instance, "pid": strconv.Itoa(h.PID), "hostname": h.Hostname,
		"version": h.Version, "address": h.Address, "capacity": strconv.Itoa(h.Capacity),
		"slots": strconv.Itoa(h.Slots), "started_at": ms(h.StartedAt), "seen_at": ms(h.SeenAt),
		"draining": strconv.FormatBool(h.Draining), "leader": strconv.FormatBool(h.Leader),
		"queues": strings.Join(h.Queues, ","),
	}
}

func hostFromHash(id string, m map[string]string) Host {
	h := Host{ID: id, Instance: m["instance"], Hostname: m["hostname"], Version: m["version"], Address: m["address"],
		StartedAt: parseMS(m["started_at"]), SeenAt: parseMS(m["seen_at"]), Alive: len(m) > 0}
	h.PID, _ = strconv.Atoi(m["pid"])
	h.Capacity, _ = strconv.Atoi(m["capacity"])
	h.Slots, _ = strconv.Atoi(m["slots"])
	h.Draining, h.Leader = m["draining"] == "true", m["leader"] == "true"
	if q := m["queues"]; q != "" {
		h.Queues = strings.Split(q, ",")
	}
	return h
}

// WriteHost stores h's record with the lease as TTL and indexes it.
func (s *Store) WriteHost(ctx context.Context, h Host, lease time.Duration) error {
	pipe := s.rdb.Pipeline()
	pipe.HSet(ctx, s.keys.Host(h.ID), h.fields())
	pipe.PExpire(ctx, s.keys.Host(h.ID), lease)
	pipe.ZAdd(ctx, s.keys.Hosts(), redis.Z{Score: float64(h.SeenAt.UnixMilli()), Member: h.ID})
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("write host %s: %w", h.ID, err)
	}
	return nil
}

// ReadHost reads one host's record; Alive is false when it has expired.
func (s *Store) ReadHost(ctx context.Context, id string) (Host, error) {
	m, err := s.rdb.HGetAll(ctx, s.keys.Host(id)).Result()
	if err != nil {
		return Host{}, fmt.Errorf("read host %s: %w", id, err)
	}
	return hostFromHash(id, m), nil
}

// Hosts lists every host seen (alive or not), by id.
func (s *Store) Hosts(ctx context.Context) ([]Host, error) {
	zs, err := s.rdb.ZRangeWithScores(ctx, s.keys.Hosts(), 0, -1).Result()
	if err != nil {
		return nil, fmt.Errorf("list hosts: %w", err)
	}
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.MapStringStringCmd, len(zs))
	ttls := make([]*redis.DurationCmd, len(zs))
	for i, z := range zs {
		id, _ := z.Member.(string)
		cmds[i] = pipe.HGetAll(ctx, s.keys.Host(id))
		ttls[i] = pipe.PTTL(ctx, s.keys.Host(id))
	}
	if len(zs) > 0 {
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return nil, fmt.Errorf("read hosts: %w", err)
		}
	}
	out := make([]Host, len(zs))
	for i, z := range zs {
		id, _ := z.Member.(string)
		out[i] = hostFromHash(id, cmds[i].Val())
		out[i].ID = id
		if !out[i].Alive {
			out[i].SeenAt = time.UnixMilli(int64(z.Score))
		} else if ttl := ttls[i].Val(); ttl > 0 {
			out[i].TTL = ttl
		}
	}
	return out, nil
}
