package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/r3labs/sse/v2"
	"github.com/redis/go-redis/v9"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/internal/clock"
	"github.com/vigil-dev/vigil/metrics"
)

// Defaults of SSEConfig (docs/design.md §10).
const (
	SSEMaxClientsDefault = 10_000
	// SSEMaxClientsPerAddressDefault: a dashboard tab holds one stream.
	SSEMaxClientsPerAddressDefault = 32
	SSEMaxLagDefault               = 1000
	SSEKeepAliveDefault            = 15 * time.Second
	// SSEReadBlockDefault bounds one blocking read of the event stream: a
	// read returns as soon as an entry arrives; the bound only decides how
	// long Close waits for the reader.
	SSEReadBlockDefault = time.Second
)

// SSEConfig configures the event stream (GET /api/v1/events).
type SSEConfig struct {
	// MaxClients caps concurrent event clients; beyond it: 503.
	MaxClients int
	// MaxClientsPerAddress caps the concurrent event clients of one client
	// address (behind a trusted proxy, the forwarded one); beyond it: 429.
	MaxClientsPerAddress int
	// MaxLag is how many entries a client catching up may be behind (it is
	// disconnected beyond, and resumes with Last-Event-ID), and how many
	// events the stream shared by the clients of one pattern set holds.
	MaxLag int
	// KeepAlive is the interval of keep-alive comments.
	KeepAlive time.Duration
	// ReadBlock bounds one blocking read of the stream (see
	// SSEReadBlockDefault).
	ReadBlock time.Duration
}

func (c SSEConfig) withDefaults() SSEConfig {
	if c.MaxClients <= 0 {
		c.MaxClients = SSEMaxClientsDefault
	}
	if c.MaxClientsPerAddress <= 0 {
		c.MaxClientsPerAddress = SSEMaxClientsPerAddressDefault
	}
	if c.MaxLag <= 0 {
		c.MaxLag = SSEMaxLagDefault
	}
	if c.KeepAlive <= 0 {
		c.KeepAlive = SSEKeepAliveDefault
	}
	if c.ReadBlock <= 0 {
		c.ReadBlock = SSEReadBlockDefault
	}
	return c
}

// closeGrace is how long close lets streams end cleanly before it cuts
// the writes of clients that do not read.
const closeGrace = time.Second

// memoryLag is how many frames at most a joining client's writer holds
// while the client catches up (sseWriter); past it the catch-up reads on
// from the Redis stream, until the client is more than MaxLag entries
// behind.
const memoryLag = 256

// stallCheck is the period of the watchdog: a client whose write has not
// moved for a whole period is disconnected (r3labs/sse's stream waits for
// each subscriber in turn, so a client that does not read would hold up
// every other client of its stream).
const stallCheck = 2 * time.Second

// broker reads the event stream with one blocking read at a time and fans
// every entry out to the clients whose patterns match its topic, through
// r3labs/sse: one sse stream per distinct pattern set (group), each entry
// published once to each matching stream; a client writes its own
// snapshot and catch-up, then its group's frames pass through (serve,
// sseWriter). AutoReplay off (history comes from the Redis stream).
type broker struct {
	cfg      SSEConfig
	store    *health.Store
	log      *slog.Logger
	clock    clock.Clock
	snapshot func(context.Context, subscription) ([]health.Event, error)
	// onEntry is told the type and topic of every entry read (health
	// announcements follow worker and host changes).
	onEntry func(typ, topic string)

	sse    *sse.Server
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup // reader and keep-alive goroutines
	watch  clock.Timer    // the watchdog's next look (under mu)
	wclock clock.Clock    // the watchdog's clock (under mu)
	conns  sync.WaitGroup // connections being served
	ready  chan struct{}  // closed once pos is known

	mu      sync.Mutex
	pos     streamID // last entry fanned out
	groups  map[string]*group
	clients map[string]*client // by id
	// catching are the clients still catching up (not yet joined).
	catching map[*client]struct{}
	// seq counts the entries fanned out; recent holds the ids of the last
	// ones (the entry of seq n at n % len), to tell how far behind a
	// catching client is.
	seq     int64
	recent  []streamID
	nextID  uint64
	closed  bool
	serving int            // connections admitted (for MaxClients)
	perAddr map[string]int // connections admitted per client address
	// subsGen counts the creations and deletions of groups; fresh are the
	// groups created since fanOut took its snapshot of the pattern sets.
	subsGen uint64
	fresh   map[string]*group
	// snap is fanOut's view of the groups' pattern sets, matched outside
	// mu (only the reader goroutine touches it).
	snap subsSnapshot
	// readerID is the CLIENT ID of the reader's connection (0: unknown).
	readerID int64
	stats    brokerStats
	// views make the live worker_updates of current-job changes (reader
	// goroutine only).
	views *workerViews
	// metrics counts clients, entries and lag drops (nil: not counted).
	metrics *metrics.Metrics
	// snaps are the snapshot reads under way, by pattern set; onSnapWait
	// (tests) is called, under mu, whenever a client begins to wait for one.
	snaps      map[string]*snapSlot
	onSnapWait func()
	// endsRunning is the read of the stream's ends under way for plan,
	// endsNext the one that starts after it (sharedEnds); readEnds makes
	// one (tests replace it), onEndsWait (tests) is called, under mu,
	// whenever a client begins to wait for one.
	endsRunning, endsNext *endsRead
	readEnds              func(context.Context) (streamEnds, error)
	onEndsWait            func()
	// moved is closed, and replaced, whenever a client has come, left or
	// caught up (tests wait on it).
	moved chan struct{}
}

// brokerStats count what the broker did (for tests and metrics).
type brokerStats struct {
	Entries int64 // stream entries read
	Dropped int64 // clients disconnected for lag
}

// group is the clients of one pattern set: an entry is matched and
// published once per group, to its r3labs/sse stream. The group and its
// stream go when its last client leaves.
type group struct {
	sub     subscription
	stream  string
	clients map[*client]struct{}
	// req is the request r3labs/sse is given for the group's clients, each
	// with its own context: the stream's name in the query (read only,
	// shared).
	req *http.Request
}

func newBroker(cfg SSEConfig, store *health.Store, log *slog.Logger, clk clock.Clock,
	snapshot func(context.Context, subscription) ([]health.Event, error), onEntry func(typ, topic string)) *broker {
	cfg = cfg.withDefaults()
	s := sse.New()
	s.AutoReplay = false
	s.AutoStream = false
	// A stream's buffer takes a burst of up to MaxLag entries without
	// the reader waiting (one buffer per pattern set, not per client).
	s.BufferSize = cfg.MaxLag
	b := &broker{
		recent: make([]streamID, min(cfg.MaxLag+1, 1<<16)),
		cfg:    cfg, store: store, log: log, clock: clk, wclock: clk, snapshot: snapshot, onEntry: onEntry,
		sse: s, ready: make(chan struct{}),
		groups: map[string]*group{}, clients: map[string]*client{}, catching: map[*client]struct{}{},
		perAddr: map[string]int{}, fresh: map[string]*group{}, views: newWorkerViews(store, log), moved: make(chan struct{}),
		snaps: map[string]*snapSlot{},
	}
	b.readEnds = func(ctx context.Context) (streamEnds, error) {
		return readEnds(ctx, b.store.Client(), b.store.Keys().Events())
	}
	b.ctx, b.cancel = context.WithCancel(context.Background())
	return b
}

// start runs the reader, the keep-alive ticker, and also (until close)
// each of also.
func (b *broker) start(also ...func(context.Context)) {
	b.wg.Add(2 + len(also))
	go b.read()
	go b.keepAlive()
	b.mu.Lock()
	if !b.closed {
		b.watch = b.wclock.AfterFunc(stallCheck, b.watchdog)
	}
	b.mu.Unlock()
	for _, f := range also {
		go func() {
			defer b.wg.Done()
			f(b.ctx)
		}()
	}
}

// close disconnects every client, waits for their handlers, and stops the
// goroutines: streams are closed before the sse server, so that none of
// r3labs/sse's goroutines is left behind. Safe twice.
func (b *broker) close() {
	// End every stream cleanly (its handler returns and the response ends
	// as it should); a client that does not read within closeGrace has its
	// writes cut.
	b.mu.Lock()
	b.closed = true
	if b.watch != nil {
		b.watch.Stop()
	}
	for _, c := range b.clients {
		c.cancel()
	}
	b.mu.Unlock()
	served := make(chan struct{})
	go func() {
		b.conns.Wait()
		close(served)
	}()
	grace := time.NewTimer(closeGrace)
	defer grace.Stop()
	select {
	case <-served:
	case <-grace.C:
		b.mu.Lock()
		for _, c := range b.clients {
			c.drop()
		}
		b.mu.Unlock()
		<-served
	}
	b.cancel()
	b.unblock()
	b.wg.Wait()
	b.sse.Close()
}

// acquire admits one more connection from addr, or says why not (the
// status: 503 full or closing, 429 too many from addr).
func (b *broker) acquire(addr string) (status int, why string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.closed:
		return http.StatusServiceUnavailable, "the admin server is shutting down"
	case b.serving >= b.cfg.MaxClients:
		return http.StatusServiceUnavailable, "too many event clients (sse.max_clients = " + strconv.Itoa(b.cfg.MaxClients) + "); try again later"
	case b.perAddr[addr] >= b.cfg.MaxClientsPerAddress:
		return http.StatusTooManyRequests, "too many event streams from this address (sse.max_clients_per_address = " + strconv.Itoa(b.cfg.MaxClientsPerAddress) + ")"
	}
	b.serving++
	b.perAddr[addr]++
	b.metrics.SSEClient(1)
	b.conns.Add(1)
	return 0, ""
}

func (b *broker) release(addr string) {
	b.mu.Lock()
	b.serving--
	if b.perAddr[addr]--; b.perAddr[addr] <= 0 {
		delete(b.perAddr, addr)
	}
	b.metrics.SSEClient(-1)
	b.mu.Unlock()
	b.conns.Done()
}

// read is the only reader of the stream: XREAD BLOCK from the last entry
// it saw, fanning out each batch in order.
func (b *broker) read() {
	defer b.wg.Done()
	key := b.store.Keys().Events()
	rdb := b.store.Client()
	backoff := newRetry()
	for b.ctx.Err() == nil {
		last, err := lastEntry(b.ctx, rdb, key)
		if err == nil {
			b.mu.Lock()
			b.pos = last
			b.mu.Unlock()
			close(b.ready)
			break
		}
		b.log.Warn("events: read the stream's end", "err", err)
		if !backoff.wait(b.ctx) {
			return
		}
	}
	pos := b.pos
	var conn *redis.Conn
	defer func() {
		if conn != nil {
			_ = conn.Close()
		}
	}()
	for b.ctx.Err() == nil {
		if conn == nil {
			conn = b.dedicated(rdb)
		}
		args := &redis.XReadArgs{Streams: []string{key, pos.entry()}, Block: b.cfg.ReadBlock, Count: 1000}
		var res []redis.XStream
		var err error
		if conn != nil {
			res, err = conn.XRead(b.ctx, args).Result()
		} else {
			res, err = rdb.XRead(b.ctx, args).Result()
		}
		if errors.Is(err, redis.Nil) {
			if b.views.waiting() {
				b.fanOut(nil) // current-job changes whose worker could not be read
			}
			continue
		}
		if err != nil {
			if b.ctx.Err() != nil {
				return
			}
			b.log.Warn("events: read the stream", "err", err)
			if conn != nil {
				_ = conn.Close()
				conn = nil
			}
			if !backoff.wait(b.ctx) {
				return
			}
			continue
		}
		backoff.reset()
		for _, st := range res {
			if len(st.Messages) > 0 {
				b.fanOut(st.Messages)
				pos = mustID(st.Messages[len(st.Messages)-1].ID)
			}
		}
	}
}

// dedicated returns a connection of its own for the blocking read, when the
// client can give one and Redis can unblock it (CLIENT ID, CLIENT UNBLOCK):
// close then ends the read at once instead of waiting for it to time out.
func (b *broker) dedicated(rdb redis.UniversalClient) *redis.Conn {
	cc, ok := rdb.(interface{ Conn() *redis.Conn })
	if !ok {
		return nil
	}
	conn := cc.Conn()
	id, err := conn.ClientID(b.ctx).Result()
	if err != nil { // miniredis has no CLIENT ID: the read times out instead
		_ = conn.Close()
		return nil
	}
	b.mu.Lock()
	b.readerID = id
	b.mu.Unlock()
	return conn
}

// unblock ends the reader's blocking read, if Redis can.
func (b *broker) unblock() {
	b.mu.Lock()
	id := b.readerID
	b.mu.Unlock()
	if id == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = b.store.Client().ClientUnblock(ctx, id).Err()
}

// lastEntry returns the id of the last event of the stream's last entry
// (zeroID when empty).
func lastEntry(ctx context.Context, rdb redis.UniversalClient, key string) (streamID, error) {
	msgs, err := rdb.XRevRangeN(ctx, key, "+", "-", 1).Result()
	if err != nil {
		return zeroID, err
	}
	if len(msgs) == 0 {
		return zeroID, nil
	}
	return endOf(msgs[0]), nil
}

// endOf is the id of the last event of stream entry m: its also event's
// when it is also another topic's (sent or not).
func endOf(m redis.XMessage) streamID {
	id := mustID(m.ID)
	if health.EntryAlsoTopic(m.Values) != "" {
		return id.also()
	}
	return id
}

// entry is one event of a stream entry as an SSE message.
type entry struct {
	id    streamID
	topic string
	typ   string
	ev    *sse.Event // nil: skipped (it cannot be framed), but read
	// derived: not an entry of the stream but a worker_update the broker
	// made of the job event before it (workerViews), with its id. drop: a
	// stream entry sent to no one (a worker_update older than one sent).
	// also: the second event of an entry (health.EntryAlso), re-framed
	// under its also topic.
	derived, drop, also bool
}

// appendEntries appends to dst the SSE messages of a stream entry that
// every matching client gets (one allocation per message, shared by all):
// the entry under its topic and, when it is also another topic's, the
// same under that one with the also form of its id. An event that cannot
// be framed (no topic, data that is not JSON) has no message but keeps its
// id: it is read and sent to no one.
func appendEntries(dst []entry, m redis.XMessage) []entry {
	id, _ := parseStreamID(m.ID)
	own, second := frame(m, id)
	dst = append(dst, own)
	if second.also {
		dst = append(dst, second)
	}
	return dst
}

// frame returns the message of stream entry m, with id, and that of its
// also event (second.also false when it has none).
func frame(m redis.XMessage, id streamID) (own, second entry) {
	own.id = id
	also := health.EntryAlsoTopic(m.Values)
	if also != "" {
		second = entry{id: id.also(), also: true}
	}
	topic, _ := m.Values[health.EntryTopic].(string)
	typ, _ := m.Values[health.EntryType].(string)
	data, _ := m.Values[health.EntryData].(string)
	if topic == "" || typ == "" || data == "" {
		return own, second
	}
	b := []byte(data)
	if bytes.ContainsAny(b, "\r\n") {
		// An SSE data line cannot hold a line break: compact the JSON.
		var buf bytes.Buffer
		if json.Compact(&buf, b) != nil {
			return own, second
		}
		b = buf.Bytes()
	}
	own.topic, own.typ = topic, typ
	own.ev = &sse.Event{ID: []byte(m.ID), Event: []byte(typ), Data: b}
	if also != "" {
		if d, ok := health.Reframe(b, topic, also); ok {
			second.topic, second.typ = also, typ
			second.ev = &sse.Event{ID: []byte(second.id.String()), Event: []byte(typ), Data: d}
		}
	}
	return own, second
}

// fanOut publishes entries, in order, to every joined client that matches
// and has not seen them yet. It never blocks on a client: one whose buffer
// is full is left out, to catch up from the stream on its own, and dropped
// once it is more than MaxLag entries behind. Topics are matched against
// the groups' pattern sets outside mu (a snapshot taken at the start, and
// a cache of each topic's groups while the groups do not change); under
// mu only groups created since the snapshot are matched. Called by the
// reader goroutine only.
func (b *broker) fanOut(msgs []redis.XMessage) {
	b.mu.Lock()
	if b.snap.gen != b.subsGen || b.snap.keys == nil {
		b.snap.rebuild(b.groups, b.subsGen)
		clear(b.fresh)
	}
	last := b.pos
	b.mu.Unlock()
	entries := make([]entry, 0, len(msgs)+len(msgs)/2)
	for _, m := range msgs {
		entries = appendEntries(entries, m)
	}
	entries = b.views.apply(b.ctx, entries, last)
	matched := make([][]string, len(entries))
	for i, e := range entries {
		if e.ev != nil && !e.drop {
			matched[i] = b.snap.match(e.topic)
		}
	}
	// A stream whose buffer is full gets the rest of the batch outside mu,
	// waiting for room (its goroutine waits for a slow subscriber, which
	// the watchdog disconnects if it does not move).
	var full map[*group][]*sse.Event
	publish := func(g *group, e entry) {
		if q, ok := full[g]; ok {
			full[g] = append(q, e.ev)
		} else if !b.sse.TryPublish(g.stream, e.ev) {
			if full == nil {
				full = map[*group][]*sse.Event{}
			}
			full[g] = []*sse.Event{e.ev}
		}
	}
	b.mu.Lock()
	for i, e := range entries {
		if e.ev == nil {
			if e.id.cmp(b.pos) > 0 {
				b.pos = e.id
			}
			continue
		}
		if !e.derived && !e.also {
			b.stats.Entries++
			b.seq++
			b.recent[b.seq%int64(len(b.recent))] = e.id
			b.metrics.SSEEvents(1)
		}
		// pos moves before the entry is published: a client that reads
		// pos once registered (catchUp) gets every later entry from its
		// stream.
		if !e.derived {
			b.pos = e.id
		}
		for _, k := range matched[i] {
			if g := b.groups[k]; g != nil {
				publish(g, e)
			}
		}
		for k, g := range b.fresh {
			if _, seen := b.snap.keys[k]; !seen && !e.drop && b.groups[k] == g && g.sub.match(e.topic) {
				publish(g, e)
			}
		}
		if e.derived {
			continue
		}
		for c := range b.catching {
			if b.behind(c) > int64(b.cfg.MaxLag) {
				b.lagged(c)
			}
		}
		if b.onEntry != nil {
			b.onEntry(e.typ, e.topic)
		}
	}
	b.mu.Unlock()
	for g, evs := range full {
		for _, ev := range evs {
			b.sse.Publish(g.stream, ev) // returns once queued, or once the stream is removed
		}
	}
}

// behind is how many entries fanned out since c connected c has not had
// (mu held).
func (b *broker) behind(c *client) int64 {
	// The entries after c's cursor, if the ring still holds it.
	n := int64(len(b.recent))
	lo := max(1, b.seq-n+1)
	i := sort.Search(int(b.seq-lo+1), func(i int) bool { return b.recent[(lo+int64(i))%n].cmp(c.cursor) > 0 })
	return b.seq - max(c.seq, lo+int64(i)-1)
}

// topicCacheMax bounds the topics whose matching groups are remembered.
const topicCacheMax = 4096

// subsSnapshot is the groups' pattern sets at one moment, and which of
// them each topic seen since matched.
type subsSnapshot struct {
	gen   uint64
	keys  map[string]struct{}
	subs  []subscription
	cache map[string][]string // topic -> keys of the matching groups
}

func (s *subsSnapshot) rebuild(groups map[string]*group, gen uint64) {
	s.gen, s.keys, s.subs = gen, make(map[string]struct{}, len(groups)), make([]subscription, 0, len(groups))
	for k, g := range groups {
		s.keys[k] = struct{}{}
		s.subs = append(s.subs, g.sub)
	}
	s.cache = map[string][]string{}
}

// match returns the keys of the pattern sets that match topic.
func (s *subsSnapshot) match(topic string) []string {
	if ks, ok := s.cache[topic]; ok {
		return ks
	}
	var ks []string
	for _, sub := range s.subs {
		if sub.match(topic) {
			ks = append(ks, sub.key)
		}
	}
	if len(s.cache) >= topicCacheMax {
		clear(s.cache)
	}
	s.cache[topic] = ks
	return ks
}

// lagged drops a client that fell more than MaxLag entries behind (mu
// held).
func (b *broker) lagged(c *client) {
	b.disconnect(c, "events: disconnecting a client that fell behind", "max_lag", b.cfg.MaxLag)
}

// disconnect drops c, counted and logged with msg and args (mu held).
func (b *broker) disconnect(c *client, msg string, args ...any) {
	b.stats.Dropped++
	b.metrics.SSELagged()
	b.log.Info(msg, append([]any{"client", c.id, "remote", c.remote, "joined", c.joined}, args...)...)
	c.joined = false
	delete(b.catching, c)
	c.drop()
}

// watchdog disconnects the clients whose write has not moved since its
// last look, a stallCheck ago: r3labs/sse's stream hands each frame to
// each subscriber in turn, and a subscriber whose 64 frames wait would hold
// up the others; a client stuck in the write of its snapshot or catch-up
// would hold its connection and its place until Close.
func (b *broker) watchdog() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	for _, c := range b.clients {
		p := c.w.progress.Load()
		if c.w.busy.Load() && p == c.seen {
			b.disconnect(c, "events: disconnecting a client that does not read", "stalled", stallCheck)
		}
		c.seen = p
	}
	b.watch = b.wclock.AfterFunc(stallCheck, b.watchdog)
}

// keepAliveEvent is the comment sent every KeepAlive.
var keepAliveEvent = &sse.Event{Comment: []byte("keep-alive")}

func (b *broker) keepAlive() {
	defer b.wg.Done()
	t := time.NewTicker(b.cfg.KeepAlive)
	defer t.Stop()
	for {
		select {
		case <-b.ctx.Done():
			return
		case <-t.C:
		}
		b.mu.Lock()
		for _, g := range b.groups {
			b.sse.TryPublish(g.stream, keepAliveEvent)
		}
		b.mu.Unlock()
	}
}

// retry is a capped exponential backoff for Redis errors.
type retry struct{ d time.Duration }

func newRetry() *retry { return &retry{d: 50 * time.Millisecond} }

func (r *retry) reset() { r.d = 50 * time.Millisecond }

// wait sleeps the current delay (false if ctx ended) and doubles it.
func (r *retry) wait(ctx context.Context) bool {
	t := time.NewTimer(r.d)
	defer t.Stop()
	r.d = min(2*r.d, 2*time.Second)
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
