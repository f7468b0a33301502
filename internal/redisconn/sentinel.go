package redisconn

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"strings"
	"sync"
	"time"
	"weak"

	"github.com/redis/go-redis/v9"
)

// failoverOpts remembers the options of the Sentinel clients Open made, so
// that Addr and Ping can name the sentinels and the master: go-redis's
// failover client only says "FailoverClient".
var failoverOpts sync.Map // weak.Pointer[redis.Client] → *redis.FailoverOptions

func newFailoverClient(o *redis.FailoverOptions) *sentinelClient {
	c := redis.NewFailoverClient(o)
	k := weak.Make(c)
	failoverOpts.Store(k, o)
	runtime.AddCleanup(c, func(k weak.Pointer[redis.Client]) { failoverOpts.Delete(k) }, k)
	g := newFailoverGuard(o)
	c.AddHook(g)
	return &sentinelClient{Client: c, guard: g}
}

// plainClient is c's *redis.Client, if it is one (or a Sentinel client).
func plainClient(c redis.UniversalClient) (*redis.Client, bool) {
	switch c := c.(type) {
	case *redis.Client:
		return c, true
	case *sentinelClient:
		return c.Client, true
	}
	return nil, false
}

func failoverOptionsOf(c *redis.Client) *redis.FailoverOptions {
	if v, ok := failoverOpts.Load(weak.Make(c)); ok {
		return v.(*redis.FailoverOptions)
	}
	return nil
}

// explainSentinel says why a Sentinel client's ping failed: no sentinel
// answers, the sentinels do not know the master, or the master they name
// does not answer.
func explainSentinel(ctx context.Context, o *redis.FailoverOptions, pingErr error) error {
	var why []string
	for _, a := range o.SentinelAddrs {
		sc := redis.NewSentinelClient(&redis.Options{Addr: a, Username: o.SentinelUsername, Password: o.SentinelPassword,
			TLSConfig: o.TLSConfig, DialTimeout: 500 * time.Millisecond, ReadTimeout: 500 * time.Millisecond, MaxRetries: -1})
		addr, err := sc.GetMasterAddrByName(ctx, o.MasterName).Result()
		_ = sc.Close()
		switch {
		case errors.Is(err, redis.Nil):
			why = append(why, fmt.Sprintf("%s does not know a master named %q", a, o.MasterName))
		case err != nil:
			why = append(why, fmt.Sprintf("%s: %v", a, err))
		default:
			return fmt.Errorf("redis sentinel master %q: the sentinels name %s, which does not answer: %w",
				o.MasterName, net.JoinHostPort(addr[0], addr[1]), pingErr)
		}
	}
	return fmt.Errorf("redis sentinel master %q: no sentinel gives its address (%s): %w", o.MasterName, strings.Join(why, "; "), pingErr)
}
