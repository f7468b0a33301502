package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/vigil-dev/vigil/config"
	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/internal/testredis"
	"github.com/vigil-dev/vigil/supervisor"
)

// secretParts are what no output may hold of the passwords below.
var secretParts = []string{"secretpw", "ZZsecret", "sec^ret", "sec{ret}", "sec ret", "%ZZ", "Pa%"}

// badRedisURLs hold passwords and do not parse, each in its own way.
var badRedisURLs = []string{
	"redis://:Pa%ZZsecretpw@127.0.0.1/0",
	"redis://user:sec^retpw@127.0.0.1/0",
	"redis://:sec{ret}pw@127.0.0.1/0",
	"redis://:sec retpw@127.0.0.1/0",
	"rediss://:Pa%ZZsecretpw@127.0.0.1/0?skip_verify=true",
	"redis://:secretpw@127.0.0.1:notaport/0",
	"redis://:secretpw@[::1/0",
	"redis:/:secretpw@127.0.0.1",
	"redis-sentinel://:Pa%ZZsecretpw@127.0.0.1:26379,127.0.0.2:26379/mymaster/0",
	"redis-sentinel://127.0.0.1,127.0.0.2/mymaster/0?sentinel_password=secretpw&bogus_option=1",
	"redis-sentinel://:secretpw@127.0.0.1/mymaster/x",
	"redis-cluster://:Pa%ZZsecretpw@127.0.0.1:7000,127.0.0.2:7001",
	"redis-cluster://:secretpw@127.0.0.1:7000/3",
}

// TestMalformedRedisURLsPrintNoPassword feeds Redis URLs that hold a
// password and do not parse through every entry point (--redis,
// VIGIL_REDIS_URL, the config file, a worker's VIGIL_REDIS_URL) and greps
// all that vigil printed (issue 18, row 2: `invalid URL escape "%ZZ"`
// came with the whole URL).
func TestMalformedRedisURLsPrintNoPassword(t *testing.T) {
	dir := t.TempDir()
	for i, u := range badRedisURLs {
		path := filepath.Join(dir, "vigil"+string(rune('a'+i))+".yaml")
		if err := os.WriteFile(path, []byte("redis: '"+u+"'\nlisten: 127.0.0.1:0\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		entries := []struct {
			name string
			args []string
			env  map[string]string
		}{
			{"flag", []string{"serve", "--listen", "127.0.0.1:0", "--redis", u}, nil},
			{"env", []string{"serve", "--listen", "127.0.0.1:0"}, map[string]string{"VIGIL_REDIS_URL": u}},
			{"config", []string{"serve", "--config", path}, nil},
			{"worker", []string{"worker"}, map[string]string{health.EnvRedisURL: u, health.EnvComponent: "worker:q:0",
				health.EnvQueue: "q", health.EnvSlot: "0", health.EnvHost: "h", health.EnvPrefix: "vigil:"}},
		}
		for _, e := range entries {
			for k, v := range e.env {
				t.Setenv(k, v)
			}
			var out, errb bytes.Buffer
			t.Logf("%s %q", e.name, u)
			code := run(e.args, &out, &errb)
			for k := range e.env {
				os.Unsetenv(k)
			}
			all := out.String() + errb.String()
			if code == 0 {
				t.Errorf("%s %q: exit 0", e.name, u)
			}
			for _, p := range secretParts {
				if strings.Contains(all, p) {
					t.Errorf("%s %q: output holds %q: %s", e.name, u, p, strings.TrimSpace(all))
					break
				}
			}
			if !strings.Contains(all, "xxxxx") && strings.Contains(u, "@") {
				t.Errorf("%s %q: the error does not show the redacted URL: %s", e.name, u, strings.TrimSpace(all))
			}
		}
	}
}

// TestEmbeddedRedisNeedsAPassword: the embedded Redis of `vigil serve`
// without redis (and of the demo) refuses clients that do not know its
// random password; the workers get it in their URL (issue 18, row 7: any
// local user could HSET the pause flags).
func TestEmbeddedRedisNeedsAPassword(t *testing.T) {
	cfg := config.Default()
	cfg.Redis = config.RedisEmbedded
	cfg.Listen = "127.0.0.1:0"
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	urls := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- serve(ctx, cfg, discardLogger(), func(sup *supervisor.Supervisor) { urls <- sup.Config().RedisURL })
	}()
	var url string
	select {
	case url = <-urls:
	case err := <-done:
		t.Fatalf("serve: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not start")
	}
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	}()
	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Fatalf("workers' URL %q: %v", url, err)
	}
	if len(opt.Password) < 16 {
		t.Errorf("embedded Redis password %q: want a random one of 16+ characters", opt.Password)
	}
	anon := redis.NewClient(&redis.Options{Addr: opt.Addr})
	defer anon.Close()
	err = anon.HSet(ctx, "vigil:control", "paused", "1").Err()
	if err == nil || !strings.Contains(err.Error(), "NOAUTH") {
		t.Errorf("HSET without the password: %v, want NOAUTH", err)
	}
	auth := redis.NewClient(opt)
	defer auth.Close()
	if err := auth.Ping(ctx).Err(); err != nil {
		t.Errorf("PING with the workers' URL: %v", err)
	}
}

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// TestStartupWarnsAboutSecrets: vigil serve warns when its config file
// holds a secret and others may read it, when the Redis URL skips TLS
// verification, when the token is shorter than 16 bytes, and when a
// secret is on the command line (visible in ps) (issue 18, row 12).
func TestStartupWarnsAboutSecrets(t *testing.T) {
	port := testredis.FreePort(t) // nothing listens there: serve stops after the warnings
	path := filepath.Join(t.TempDir(), "vigil.yaml")
	if err := os.WriteFile(path, []byte("token: short-token\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	run([]string{"serve", "--config", path, "--listen", "127.0.0.1:0",
		"--redis", "rediss://:hunter2hunter2@127.0.0.1:" + strconv.Itoa(port) + "/0?skip_verify=true"}, &out, &errb)
	all := out.String() + errb.String()
	for _, want := range []string{"readable by other users", "skip_verify", "shorter than 16 bytes", "visible in the process list", "VIGIL_TOKEN_FILE"} {
		if !strings.Contains(all, want) {
			t.Errorf("no warning with %q in:\n%s", want, all)
		}
	}
	if strings.Contains(all, "hunter2") || strings.Contains(all, "short-token") {
		t.Errorf("a secret is in the output:\n%s", all)
	}
}

// TestTokenAndRedisFromFiles: --token-file and VIGIL_REDIS_FILE give the
// secrets without putting them on the command line or in the config.
func TestTokenAndRedisFromFiles(t *testing.T) {
	dir := t.TempDir()
	tok, rf := filepath.Join(dir, "token"), filepath.Join(dir, "redis")
	port := testredis.FreePort(t)
	_ = os.WriteFile(tok, []byte("a-token-of-enough-bytes\n"), 0o600)
	_ = os.WriteFile(rf, []byte("redis://:pw-from-file@127.0.0.1:"+strconv.Itoa(port)+"/0\n"), 0o600)
	t.Setenv("VIGIL_REDIS_FILE", rf)
	var out, errb bytes.Buffer
	run([]string{"serve", "--token-file", tok, "--listen", "127.0.0.1:0"}, &out, &errb)
	all := out.String() + errb.String()
	// It tried the Redis of the file (and did not print its password).
	if !strings.Contains(all, "127.0.0.1:"+strconv.Itoa(port)) || strings.Contains(all, "pw-from-file") {
		t.Errorf("serve with VIGIL_REDIS_FILE:\n%s", all)
	}
	if strings.Contains(all, "shorter than 16") || strings.Contains(all, "process list") {
		t.Errorf("warned about the token from a file:\n%s", all)
	}
	errb.Reset()
	if code := run([]string{"serve", "--token", "x", "--token-file", tok}, &out, &errb); code == 0 || !strings.Contains(errb.String(), "token_file") {
		t.Errorf("token and token_file together: %d %s", code, errb.String())
	}
}
