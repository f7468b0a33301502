package health_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/internal/testredis"
)

// t0 is the fake "now" of the tests, whole milliseconds as Redis keeps them.
var t0 = time.UnixMilli(1_790_000_000_000)

var tag0 = health.ComponentID{Queue: "tag", Slot: 0}

// newStore returns a store on a fresh test Redis under the test's prefix.
func newStore(tb testing.TB) (*health.Store, *testredis.Env) {
	tb.Helper()
	env := testredis.New(tb)
	return health.NewStore(env.Client, env.Prefix, 0), env
}

func testCtx(tb testing.TB) context.Context {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	tb.Cleanup(cancel)
	return ctx
}

// record is a component record as the supervisor would write it.
func record(id health.ComponentID, st health.Status, pid int) health.Component {
	return health.Component{
		ID:        id,
		Status:    st,
		Host:      "box-1",
		Instance:  "i1",
		PID:       pid,
		StartedAt: t0,
		UpdatedAt: t0.Add(time.Second),
	}
}

// seed stores c as it is, without the status check and without an event.
func seed(tb testing.TB, s *health.Store, c health.Component) {
	tb.Helper()
	if _, err := s.Write(testCtx(tb), c, health.Write{NoCheck: true, NoEvent: true, Index: true}); err != nil {
		tb.Fatalf("seed %s as %s: %v", c.ID, c.Status, err)
	}
}

func hash(tb testing.TB, s *health.Store, key string) map[string]string {
	tb.Helper()
	h, err := s.Client().HGetAll(testCtx(tb), key).Result()
	if err != nil {
		tb.Fatalf("HGETALL %s: %v", key, err)
	}
	return h
}

// events reads the whole event stream.
func events(tb testing.TB, s *health.Store) []redis.XMessage {
	tb.Helper()
	msgs, err := s.Client().XRange(testCtx(tb), s.Keys().Events(), "-", "+").Result()
	if err != nil {
		tb.Fatalf("XRANGE events: %v", err)
	}
	return msgs
}

// decodeEvent checks a stream entry's fields and decodes its data.
func decodeEvent(tb testing.TB, m redis.XMessage) health.Event {
	tb.Helper()
	data, _ := m.Values["data"].(string)
	var e health.Event
	if err := json.Unmarshal([]byte(data), &e); err != nil {
		tb.Fatalf("event %s: data %q: %v", m.ID, data, err)
	}
	if m.Values["topic"] != e.Topic || m.Values["type"] != e.Type {
		tb.Fatalf("event %s: fields topic=%v type=%v disagree with data %+v", m.ID, m.Values["topic"], m.Values["type"], e)
	}
	return e
}

// dump reads every key under the store's prefix, whatever its type, so that
// tests can assert that nothing at all changed.
func dump(tb testing.TB, s *health.Store) map[string]string {
	tb.Helper()
	ctx := testCtx(tb)
	rdb := s.Client()
	var keys []string
	iter := rdb.Scan(ctx, 0, s.Keys().Prefix+"*", 1000).Iterator()
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		tb.Fatalf("SCAN: %v", err)
	}
	out := map[string]string{}
	for _, k := range keys {
		typ, err := rdb.Type(ctx, k).Result()
		if err != nil {
			tb.Fatalf("TYPE %s: %v", k, err)
		}
		var v any
		switch typ {
		case "string":
			v, err = rdb.Get(ctx, k).Result()
		case "hash":
			v, err = rdb.HGetAll(ctx, k).Result()
		case "set":
			var m []string
			m, err = rdb.SMembers(ctx, k).Result()
			slices.Sort(m)
			v = m
		case "zset":
			v, err = rdb.ZRangeWithScores(ctx, k, 0, -1).Result()
		case "stream":
			v, err = rdb.XRange(ctx, k, "-", "+").Result()
		default:
			tb.Fatalf("key %s of unexpected type %s", k, typ)
		}
		if err != nil {
			tb.Fatalf("read %s: %v", k, err)
		}
		out[k] = typ + " " + fmt.Sprint(v)
	}
	return out
}

func diffDumps(before, after map[string]string) []string {
	var d []string
	for k, v := range before {
		if w, ok := after[k]; !ok {
			d = append(d, "deleted "+k)
		} else if w != v {
			d = append(d, fmt.Sprintf("changed %s: %s → %s", k, v, w))
		}
	}
	for k := range after {
		if _, ok := before[k]; !ok {
			d = append(d, "added "+k+": "+after[k])
		}
	}
	slices.Sort(d)
	return d
}
