// Package redisconn opens Vigil's Redis connections from a URL.
package redisconn

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Open parses url (redis:// or rediss://) and returns a client. It does
// not connect.
func Open(url string) (*redis.Client, error) {
	opt, err := redis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("redis url: %w", err)
	}
	return redis.NewClient(opt), nil
}

// Ping checks that the server answers within timeout, naming its address.
func Ping(ctx context.Context, c *redis.Client, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("redis at %s does not answer: %w", c.Options().Addr, err)
	}
	return nil
}
