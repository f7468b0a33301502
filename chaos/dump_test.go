package chaos_test

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// volatile matches what a live host and its workers rewrite on their own,
// request or not: heartbeats, the host record and index, leases, asynq's
// server registry, worker statistics.
var volatile = regexp.MustCompile(`^(vigil:(hb|host|slot|wstats):\{.*|vigil:hosts|vigil:leader|asynq:(servers|workers)(:\{.*)?)$`)

// volatileFields are the fields of a component record a heartbeat writes.
var volatileFields = []string{"last_heartbeat"}

// dump reads every key of the server (type and value), leaving out what
// volatile matches.
func dump(t *testing.T, rdb *redis.Client) map[string]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	keys, err := rdb.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatalf("KEYS: %v", err)
	}
	out := map[string]string{}
	for _, k := range keys {
		if volatile.MatchString(k) {
			continue
		}
		typ := rdb.Type(ctx, k).Val()
		var v any
		switch typ {
		case "string":
			v = rdb.Get(ctx, k).Val()
		case "hash":
			h := rdb.HGetAll(ctx, k).Val()
			if strings.HasPrefix(k, "vigil:component:") {
				for _, f := range volatileFields {
					delete(h, f)
				}
			}
			v = h
		case "set":
			m := rdb.SMembers(ctx, k).Val()
			slices.Sort(m)
			v = m
		case "zset":
			v = rdb.ZRangeWithScores(ctx, k, 0, -1).Val()
		case "list":
			v = rdb.LRange(ctx, k, 0, -1).Val()
		case "stream":
			v = rdb.XRange(ctx, k, "-", "+").Val()
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
			d = append(d, fmt.Sprintf("changed %s: %.300s → %.300s", k, v, w))
		}
	}
	for k := range after {
		if _, ok := before[k]; !ok {
			d = append(d, "added "+k)
		}
	}
	slices.Sort(d)
	return d
}
