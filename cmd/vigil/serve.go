package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/vigil-dev/vigil"
	"github.com/vigil-dev/vigil/config"
	"github.com/vigil-dev/vigil/internal/redisconn"
	"github.com/vigil-dev/vigil/supervisor"
)

func serveCmd(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("vigil serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "", "YAML configuration file (docs/design.md §10)")
	flags := config.RegisterFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("serve: unexpected argument %q", fs.Arg(0))
	}
	cfg, file, err := loadConfig(*path, flags)
	if err != nil {
		return err
	}
	log, err := newLogger(stderr, cfg.LogFormat, cfg.LogLevel)
	if err != nil {
		return err
	}
	for _, w := range cfg.Warnings(*path, file, flags) {
		log.Warn(w)
	}
	return serve(ctx, cfg, log, nil)
}

// loadConfig reads the file, then the environment, then the flags, then
// the secret files, and checks the result. It returns the file's own
// settings too (for Warnings).
func loadConfig(path string, flags *config.Flags) (cfg, file config.Config, err error) {
	if cfg, err = config.Load(path); err != nil {
		return cfg, file, err
	}
	file = cfg
	if err := applyOverrides(&cfg, flags); err != nil {
		return cfg, file, err
	}
	return cfg, file, nil
}

// applyOverrides applies the environment, the flags and the secret files,
// and checks the result.
func applyOverrides(cfg *config.Config, flags *config.Flags) error {
	if err := cfg.ApplyEnv(os.LookupEnv); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	if err := flags.Apply(cfg); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	if err := cfg.ReadSecretFiles(); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	if err := vigil.ValidateSettings(*cfg); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	return nil
}

// serve runs Vigil until ctx ends. started, if set, is called once the
// supervisor runs.
func serve(ctx context.Context, cfg config.Config, log *slog.Logger, started func(*supervisor.Supervisor)) error {
	// go-redis's own lines (reconnects, a new Sentinel master) go through
	// slog too: --log-format json stays JSON.
	redisconn.SetLogger(log)
	url := cfg.Redis
	switch url {
	case "":
		return fmt.Errorf("config: redis: %w", config.ErrNoRedis)
	case config.RedisEmbedded:
		m, password, err := startEmbeddedRedis()
		if err != nil {
			return err
		}
		defer m.Close()
		// The workers get the password in their URL; another vigil of the
		// same user may join with --redis-file (a 0600 file in a 0700
		// directory); nobody else.
		url = "redis://:" + password + "@" + m.Addr()
		file, remove, err := writeRedisFile(url)
		if err != nil {
			return err
		}
		defer remove()
		log.Warn("redis: embedded: using an embedded in-memory Redis (random password, handed to the workers); all state is lost when vigil exits",
			"addr", m.Addr(), "redis_file", file)
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("admin server: %w", err)
	}
	defer ln.Close()
	cfg.Redis = url
	v, err := vigil.New(vigil.Config{Settings: cfg, Logger: log, Address: ln.Addr().String(), Version: version})
	if err != nil {
		return err
	}
	if err := v.Start(ctx); err != nil {
		return err
	}
	srv := &http.Server{
		Handler:           v,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	srv.RegisterOnShutdown(v.CloseEvents)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	log.Info("admin server listening", "url", "http://"+ln.Addr().String()+"/", "docs", "http://"+ln.Addr().String()+"/docs")
	if started != nil {
		started(v.Supervisor())
	}
	select {
	case <-ctx.Done():
	case err := <-served:
		log.Error("admin server stopped", "err", err)
	}
	log.Info("shutting down: stopping workers", "stop_timeout", cfg.StopTimeout)
	// The admin server first (its event streams end with it: they never
	// end by themselves), then the workers; both within one bound,
	// stop_timeout + 2 s after the signal (docs/design.md §4.5).
	sctx, cancel := context.WithTimeout(context.Background(), time.Duration(cfg.StopTimeout)+2*time.Second)
	defer cancel()
	hctx, hcancel := context.WithTimeout(sctx, time.Second)
	defer hcancel()
	if err := srv.Shutdown(hctx); err != nil {
		_ = srv.Close()
	}
	if err := v.Close(sctx); err != nil {
		return err
	}
	log.Info("stopped")
	return nil
}

// startEmbeddedRedis starts a miniredis on a loopback port whose keys expire
// on the real clock, reachable by the worker processes, and by no other
// local user: it requires a random password.
func startEmbeddedRedis() (*miniredis.Miniredis, string, error) {
	var b [24]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, "", fmt.Errorf("start embedded redis: %w", err)
	}
	password := hex.EncodeToString(b[:])
	m := miniredis.NewMiniRedis()
	m.ClockTTL(true)
	m.RequireAuth(password)
	if err := m.StartAddr("127.0.0.1:0"); err != nil {
		return nil, "", fmt.Errorf("start embedded redis: %w", err)
	}
	return m, password, nil
}

// writeRedisFile writes url to a file only this user can read, for
// --redis-file; remove deletes it.
func writeRedisFile(url string) (path string, remove func(), err error) {
	dir, err := os.MkdirTemp("", "vigil-embedded-")
	if err != nil {
		return "", nil, fmt.Errorf("embedded redis: %w", err)
	}
	path = filepath.Join(dir, "redis-url")
	if err := os.WriteFile(path, []byte(url+"\n"), 0o600); err != nil {
		os.RemoveAll(dir)
		return "", nil, fmt.Errorf("embedded redis: %w", err)
	}
	return path, func() { os.RemoveAll(dir) }, nil
}
