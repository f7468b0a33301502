package redisconn

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/redis/go-redis/v9"
)

// SetLogger sends go-redis's own log lines (a failed dial, a new Sentinel
// master, a reloaded slot map) to log instead of plain text on stderr, so
// that a JSON log stays JSON. go-redis has one logger per process: the
// last call wins. Topology news is logged at Info, the rest at Warn; every
// line carries lib=go-redis.
func SetLogger(log *slog.Logger) {
	logger.Store(log)
	redis.SetLogger(slogPrintf{log})
}

type slogPrintf struct{ log *slog.Logger }

func (s slogPrintf) Printf(ctx context.Context, format string, v ...any) {
	msg := strings.TrimSpace(fmt.Sprintf(format, v...))
	if ctx == nil {
		ctx = context.Background()
	}
	s.log.Log(ctx, levelOf(msg), msg, slog.String("lib", "go-redis"))
}

// infoPrefixes are go-redis lines that report a topology change, not a
// fault.
var infoPrefixes = []string{"sentinel: new master", "sentinel: discovered new sentinel", "sentinel: selected addr",
	"cluster: slots", "pubsub: reconnecting to new endpoint"}

func levelOf(msg string) slog.Level {
	for _, p := range infoPrefixes {
		if strings.HasPrefix(msg, p) {
			return slog.LevelInfo
		}
	}
	return slog.LevelWarn
}
