package queue

import (
	"context"
	"testing"

	"github.com/vigil-dev/vigil/internal/testredis"
)

// testQueue names a queue of the test's own (short name + the env's
// prefix) whose asynq keys are deleted after the test on a shared Redis.
func testQueue(t *testing.T, env *testredis.Env, short string) string {
	t.Helper()
	q := short + env.Prefix[2:len(env.Prefix)-1]
	t.Cleanup(func() {
		if env.Mini != nil {
			return
		}
		ctx := context.Background()
		keys, _ := env.Client.Keys(ctx, "asynq:{"+q+"}:*").Result()
		if len(keys) > 0 {
			env.Client.Del(ctx, keys...)
		}
		env.Client.SRem(ctx, "asynq:queues", q)
	})
	return q
}
