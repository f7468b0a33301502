package server

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"
)

// errTrimmed ends a catch-up whose next events are gone from the stream:
// the client is disconnected, and resuming from its last event gives it a
// reset and a fresh snapshot (plan), never the rest as if nothing were
// missing.
var errTrimmed = errors.New("events after the client's position were trimmed from the stream meanwhile")

// readAfter reads the stream's entries from start to end (at most count;
// 0: all) for a client whose last event is cursor, and fails with
// errTrimmed when, as they are read, the stream's first entry is after
// cursor's: what lay between may have been trimmed (the rule plan applies
// to a Last-Event-ID). One round trip (MULTI: the page and the first entry
// of the same moment). A zeroID cursor (the stream was empty) is never
// trimmed past.
func readAfter(ctx context.Context, rdb redis.UniversalClient, key string, cursor streamID, start, end string, count int64) ([]redis.XMessage, error) {
	pipe := rdb.TxPipeline()
	var page *redis.XMessageSliceCmd
	if count > 0 {
		page = pipe.XRangeN(ctx, key, start, end, count)
	} else {
		page = pipe.XRange(ctx, key, start, end)
	}
	first := pipe.XRangeN(ctx, key, "-", "+", 1)
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, err
	}
	if cursor != zeroID {
		f := first.Val()
		if len(f) == 0 || (streamID{ms: cursor.ms, seq: cursor.seq}).cmp(mustID(f[0].ID)) < 0 {
			return nil, errTrimmed
		}
	}
	return page.Val(), nil
}
