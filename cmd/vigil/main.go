// Command vigil supervises pools of asynq worker processes and serves their
// admin API. See `vigil help`.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/vigil-dev/vigil/cmd/vigil/internal/ctl"
)

// version is set at build time (-ldflags "-X main.version=…").
var version = "dev"

const usage = `vigil supervises pools of worker processes consuming asynq queues.

Usage:
  vigil serve [--config vigil.yaml] [flags]   run the supervisor and admin server
  vigil demo                                   run a demo (embedded Redis, three pools)
  vigil worker [--demo]                        the worker runtime a pool command can be
  vigil ctl <command>                          operate a running vigil (status, workers, queues,
                                               pause, resume, restart, reset, events; "vigil ctl help")
  vigil openapi [--dir openapi]                write the admin API's OpenAPI documents
  vigil version                                print the version

Run "vigil serve -h" for every setting.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// errUsage marks an error already explained to the user.
var errUsage = errors.New("usage")

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	var err error
	switch args[0] {
	case "serve":
		err = serveCmd(ctx, args[1:], stderr)
	case "demo":
		err = demoCmd(ctx, args[1:], stderr)
	case "worker":
		err = workerCmd(ctx, args[1:], stderr)
	case "ctl":
		return ctl.Run(ctx, args[1:], stdout, stderr, os.Getenv)
	case "openapi":
		err = openapiCmd(ctx, args[1:], stdout, stderr)
	case "version", "--version":
		fmt.Fprintln(stdout, "vigil", version)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
	default:
		fmt.Fprintf(stderr, "vigil: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		return 2
	}
	fmt.Fprintln(stderr, "vigil:", err)
	return 1
}

// newLogger builds the process logger.
func newLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("log_level: %w", err)
	}
	opts := &slog.HandlerOptions{Level: lv}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return slog.New(slog.NewTextHandler(w, opts)), nil
}
