package health

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// SchemaVersion is the version of the key layout this build reads and
// writes (docs/design.md §3), stored at Keys.Schema. Bump it when a key changes
// shape; an older build then refuses to run against the new layout, and
// the newer build upgrades the stored version (migrating, if ever needed,
// in CheckSchema).
const SchemaVersion = 1

// ErrSchemaNewer is returned by CheckSchema when Redis holds a key layout
// newer than this build knows.
var ErrSchemaNewer = errors.New("redis holds a newer vigil key layout")

// schemaScript writes ARGV[1] at KEYS[1] unless a newer version is stored.
// Returns {stored before ("" if none), stored now}.
var schemaScript = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
local n = tonumber(v)
if v and not n then return {v, v} end
if not v or n < tonumber(ARGV[1]) then
  redis.call('SET', KEYS[1], ARGV[1])
  return {v or '', ARGV[1]}
end
return {v, v}`)

// CheckSchema checks the key-layout version stored in Redis: it writes
// SchemaVersion when none is stored (or an older one: there is nothing to
// migrate yet), and returns an error wrapping ErrSchemaNewer, saying what
// to do, when a newer one is. A host calls it at start-up.
func (s *Store) CheckSchema(ctx context.Context) (previous int, err error) {
	res, err := schemaScript.Run(ctx, s.rdb, []string{s.keys.Schema()}, SchemaVersion).StringSlice()
	if err != nil {
		return 0, fmt.Errorf("check key layout version %s: %w", s.keys.Schema(), err)
	}
	if len(res) != 2 {
		return 0, fmt.Errorf("check key layout version %s: unexpected reply %v", s.keys.Schema(), res)
	}
	if res[0] != "" {
		previous, err = strconv.Atoi(res[0])
		if err != nil {
			return 0, fmt.Errorf("key %s holds %q, not a key layout version: is prefix %q used by something else?", s.keys.Schema(), res[0], s.keys.Prefix)
		}
	}
	if now, _ := strconv.Atoi(res[1]); now > SchemaVersion {
		return previous, fmt.Errorf("%w: %s is %d, this vigil knows layout %d at most; upgrade vigil on this host (every host must run a build that knows layout %d) or use another prefix",
			ErrSchemaNewer, s.keys.Schema(), now, SchemaVersion, now)
	}
	return previous, nil
}
