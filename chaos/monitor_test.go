package chaos_test

import (
	"bufio"
	"context"
	"net"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// monitor records every command a Redis server runs (MONITOR), scripts'
// inner calls included.
type monitor struct {
	conn  net.Conn
	mu    sync.Mutex
	lines []string
	wg    sync.WaitGroup
}

func startMonitor(t *testing.T, addr string) *monitor {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatalf("monitor: %v", err)
	}
	br := bufio.NewReaderSize(conn, 1<<20)
	if _, err := conn.Write([]byte("MONITOR\r\n")); err != nil {
		t.Fatal(err)
	}
	if line, err := br.ReadString('\n'); err != nil || !strings.HasPrefix(line, "+OK") {
		t.Fatalf("MONITOR answered %q, %v", line, err)
	}
	m := &monitor{conn: conn}
	m.wg.Go(func() {
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				return
			}
			m.mu.Lock()
			m.lines = append(m.lines, strings.TrimSuffix(strings.TrimPrefix(line, "+"), "\r\n"))
			m.mu.Unlock()
		}
	})
	t.Cleanup(m.stop)
	return m
}

// stop ends the recording and returns it.
func (m *monitor) stop() {
	m.conn.Close()
	m.wg.Wait()
}

func (m *monitor) recorded() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.lines...)
}

// parseMonitor splits a MONITOR line, `1700000000.123456 [0 127.0.0.1:5]
// "CMD" "arg" …`, into its command and arguments (unescaped).
func parseMonitor(line string) []string {
	i := strings.IndexByte(line, ']')
	if i < 0 {
		return nil
	}
	s := line[i+1:]
	var args []string
	for {
		j := strings.IndexByte(s, '"')
		if j < 0 {
			return args
		}
		s = s[j+1:]
		var b strings.Builder
		for k := 0; k < len(s); k++ {
			c := s[k]
			switch {
			case c == '\\' && k+1 < len(s):
				k++
				switch s[k] {
				case 'n':
					b.WriteByte('\n')
				case 'r':
					b.WriteByte('\r')
				case 't':
					b.WriteByte('\t')
				case 'a':
					b.WriteByte('\a')
				case 'b':
					b.WriteByte('\b')
				case 'x':
					if k+2 < len(s) {
						if v, err := strconv.ParseUint(s[k+1:k+3], 16, 8); err == nil {
							b.WriteByte(byte(v))
							k += 2
							continue
						}
					}
					b.WriteByte('x')
				default:
					b.WriteByte(s[k])
				}
			case c == '"':
				args = append(args, b.String())
				s = s[k+1:]
				goto next
			default:
				b.WriteByte(c)
			}
		}
		return args
	next:
	}
}

// keysOf asks the server which arguments of each command are keys
// (COMMAND GETKEYS), for commands that have any.
func keysOf(t *testing.T, rdb *redis.Client, cmds [][]string) [][]string {
	t.Helper()
	out := make([][]string, len(cmds))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for from := 0; from < len(cmds); from += 1000 {
		to := min(from+1000, len(cmds))
		pipe := rdb.Pipeline()
		res := make([]*redis.Cmd, to-from)
		for i, c := range cmds[from:to] {
			args := []any{"COMMAND", "GETKEYS"}
			for _, a := range c {
				args = append(args, a)
			}
			res[i] = pipe.Do(ctx, args...)
		}
		_, _ = pipe.Exec(ctx) // commands without keys answer errors
		for i, r := range res {
			if v, err := r.StringSlice(); err == nil {
				out[from+i] = v
			}
		}
	}
	return out
}

// namespace matches the keys a Vigil cluster may address: under its
// prefix, with any hash tag naming a configured queue, one of its
// components or a known host; asynq's keys of a configured queue; asynq's
// own index and server registry.
func namespace(queues, hosts []string) *regexp.Regexp {
	q := strings.Join(queues, "|")
	h := strings.Join(hosts, "|")
	return regexp.MustCompile(`^(` +
		`vigil:[a-z]+(:\{(worker:(` + q + `):(0|[1-9][0-9]{0,5})|` + q + `|` + h + `)\})?(:[A-Za-z0-9._-]+)*` +
		`|asynq:\{(` + q + `)\}:[A-Za-z0-9:._-]*` +
		`|asynq:(queues|servers|workers)` +
		`|asynq:(servers|workers):\{[^{}]+\}` +
		// Periodic schedules are published where asynq's tools look.
		`|asynq:schedulers(:\{[^{}]+\})?` +
		`|asynq:scheduler_history:[A-Za-z0-9:._-]+` +
		`)$`)
}
