// Package ctl is `vigil ctl`, the operator's command line: it talks to a
// running admin server through the generated OpenAPI client (openapi/client)
// and, for `events`, reads the SSE stream of GET /api/v1/events. It knows
// nothing of Redis or processes.
package ctl

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/vigil-dev/vigil/openapi/client"
)

// Defaults and environment.
const (
	ServerDefault = "http://127.0.0.1:8080"
	EnvServer     = "VIGIL_SERVER"
	EnvToken      = "VIGIL_TOKEN"
	// requestTimeout bounds every request but the event stream.
	requestTimeout = 30 * time.Second
)

const usage = `vigil ctl talks to a running Vigil admin server.

Usage:
  vigil ctl [flags] <command> [arguments]

Commands:
  status                  the cluster's health, workers by status, queues
  workers                 every worker: status, host, pid, restarts, last exit
  queues                  every queue: pending, running, done, failed, paused
  pause [queue|worker]    pause every queue, one queue, or one worker (e.g. worker:tag:0: it takes no
                          new task, its queue and the other workers go on)
  resume [queue|worker]   resume every queue, one queue, or one worker
  restart <component>     restart a worker (also a failed or held one), e.g. worker:tag:0
  reset <component>       clear a worker's restart counters; it stays stopped (--restart: start it)
  remove <component>      delete a stopped worker beyond its pool's size for good (its history stays in
                          the event stream only)
  events [topic…]         follow the live events (all, or topic patterns such as worker:*:status)
  scratch                 this host's kept scratch directories (no server needed); --clean removes
                          those older than --older-than

Flags (anywhere on the line):
  --server URL   admin server (env VIGIL_SERVER, default http://127.0.0.1:8080)
  --token T      admin token (env VIGIL_TOKEN)
  --json         print the API's JSON instead of tables
  --restart      reset: start the worker again
  --reason WHY   pause: why (shown beside the pause; who is $USER@hostname)
  --limit N      events: stop after N events (0: follow until Ctrl-C)
  --dir D        scratch: the scratch root (env VIGIL_SCRATCH_DIR, default $TMPDIR/vigil-scratch)
  --clean        scratch: remove the directories listed
  --older-than D scratch: only directories older than D (e.g. 72h); required with --clean
`

// ErrUsage marks a usage error (exit code 2).
var ErrUsage = errors.New("usage")

// options are the parsed flags.
type options struct {
	server, token string
	json, restart bool
	limit         int
	reason, by    string
	// scratch
	dir       string
	clean     bool
	olderThan time.Duration
}

// Run runs `vigil ctl args…` and returns the exit code: 0 done, 1 failed,
// 2 usage. getenv reads VIGIL_SERVER and VIGIL_TOKEN.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	err := run(ctx, args, stdout, stderr, getenv)
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, ErrUsage):
		fmt.Fprintf(stderr, "vigil ctl: %s\n\n%s", strings.TrimPrefix(err.Error(), ErrUsage.Error()+": "), usage)
		return 2
	}
	fmt.Fprintln(stderr, "vigil ctl:", err)
	return 1
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	o := options{server: getenv(EnvServer), token: getenv(EnvToken)}
	if o.server == "" {
		o.server = ServerDefault
	}
	fs := flag.NewFlagSet("vigil ctl", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&o.server, "server", o.server, "")
	fs.StringVar(&o.token, "token", o.token, "")
	fs.BoolVar(&o.json, "json", false, "")
	fs.BoolVar(&o.restart, "restart", false, "")
	fs.IntVar(&o.limit, "limit", 0, "")
	fs.StringVar(&o.reason, "reason", "", "")
	o.by = getenv("USER")
	if h, err := os.Hostname(); err == nil && o.by != "" {
		o.by += "@" + h
	}
	fs.StringVar(&o.dir, "dir", getenv("VIGIL_SCRATCH_DIR"), "")
	fs.BoolVar(&o.clean, "clean", false, "")
	fs.DurationVar(&o.olderThan, "older-than", 0, "")
	// Flags may come before or after the command and its arguments.
	var pos []string
	for rest := args; ; {
		if err := fs.Parse(rest); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				fmt.Fprint(stdout, usage)
				return err
			}
			return fmt.Errorf("%w: %v", ErrUsage, err)
		}
		if fs.NArg() == 0 {
			break
		}
		pos = append(pos, fs.Arg(0))
		rest = fs.Args()[1:]
	}
	if len(pos) == 0 {
		return fmt.Errorf("%w: no command", ErrUsage)
	}
	if pos[0] == "scratch" { // local: no server
		if len(pos) > 1 {
			return fmt.Errorf("%w: scratch takes no argument", ErrUsage)
		}
		return scratch(o, stdout, time.Now())
	}
	c, err := newCLI(o, stdout)
	if err != nil {
		return err
	}
	c.stderr = stderr
	cmd, rest := pos[0], pos[1:]
	want := func(min, max int, what string) error {
		if len(rest) < min || len(rest) > max {
			return fmt.Errorf("%w: %s takes %s", ErrUsage, cmd, what)
		}
		return nil
	}
	switch cmd {
	case "status":
		if err := want(0, 0, "no argument"); err != nil {
			return err
		}
		return c.status(ctx)
	case "workers":
		if err := want(0, 0, "no argument"); err != nil {
			return err
		}
		return c.workers(ctx)
	case "queues":
		if err := want(0, 0, "no argument"); err != nil {
			return err
		}
		return c.queues(ctx)
	case "pause", "resume":
		if err := want(0, 1, "at most one queue"); err != nil {
			return err
		}
		return c.pause(ctx, cmd == "pause", rest)
	case "restart", "reset", "remove":
		if err := want(1, 1, "one component, e.g. worker:tag:0"); err != nil {
			return err
		}
		return c.workerAction(ctx, cmd, rest[0])
	case "events":
		return c.events(ctx, rest)
	case "help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	return fmt.Errorf("%w: unknown command %q", ErrUsage, cmd)
}

// cli is one invocation.
type cli struct {
	o      options
	out    io.Writer
	stderr io.Writer
	api    *client.ClientWithResponses
	http   *http.Client
}

func newCLI(o options, out io.Writer) (*cli, error) {
	o.server = strings.TrimRight(o.server, "/")
	if !strings.HasPrefix(o.server, "http://") && !strings.HasPrefix(o.server, "https://") {
		return nil, fmt.Errorf("%w: --server %q must be an http:// or https:// URL", ErrUsage, o.server)
	}
	hc := &http.Client{}
	auth := func(_ context.Context, req *http.Request) error {
		if o.token != "" {
			req.Header.Set("Authorization", "Bearer "+o.token)
		}
		req.Header.Set("User-Agent", "vigil-ctl")
		return nil
	}
	api, err := client.NewClientWithResponses(o.server+"/", client.WithHTTPClient(hc), client.WithRequestEditorFn(auth))
	if err != nil {
		return nil, err
	}
	return &cli{o: o, out: out, api: api, http: hc}, nil
}

// bounded is the context of one request.
func bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, requestTimeout)
}

// check turns a transport error or a non-2xx answer into an error that says
// what the server said.
// answer is read only when err is nil.
func (c *cli) check(err error, answer func() (*http.Response, []byte)) error {
	if err != nil {
		return fmt.Errorf("cannot reach vigil at %s (set --server or %s): %w", c.o.server, EnvServer, err)
	}
	resp, body := answer()
	if resp.StatusCode < 300 {
		return nil
	}
	var p client.ErrorModel
	msg := strings.TrimSpace(string(body))
	if json.Unmarshal(body, &p) == nil && p.Detail != nil {
		msg = *p.Detail
	}
	hint := ""
	switch resp.StatusCode {
	case http.StatusUnauthorized:
		hint = fmt.Sprintf(" (give the admin token: --token or %s)", EnvToken)
	case http.StatusForbidden:
		if c.o.token == "" {
			hint = fmt.Sprintf(" (give the admin token: --token or %s)", EnvToken)
		}
	}
	return fmt.Errorf("%s: %s%s", resp.Status, msg, hint)
}

// printJSON prints the API's answer as it came, indented.
func (c *cli) printJSON(body []byte) error {
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		_, err := c.out.Write(body)
		return err
	}
	enc := json.NewEncoder(c.out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
