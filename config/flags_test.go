package config

import (
	"flag"
	"io"
	"strings"
	"testing"
	"time"
)

func TestFlags(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fl := RegisterFlags(fs)
	if err := fs.Parse([]string{"--listen", "127.0.0.1:1", "--heartbeat.ttl", "40s", "--read-only", "--policy.max-in-window=9"}); err != nil {
		t.Fatal(err)
	}
	c := Default()
	c.Listen = "from-file"
	if err := fl.Apply(&c); err != nil {
		t.Fatal(err)
	}
	if c.Listen != "127.0.0.1:1" || time.Duration(c.Heartbeat.TTL) != 40*time.Second || !c.ReadOnly || c.Policy.MaxInWindow != 9 {
		t.Fatalf("flags not applied: %+v", c)
	}
	fs2 := flag.NewFlagSet("t", flag.ContinueOnError)
	fs2.SetOutput(io.Discard)
	fl2 := RegisterFlags(fs2)
	_ = fs2.Parse([]string{"--stop-timeout", "never"})
	if err := fl2.Apply(&c); err == nil {
		t.Fatal("bad duration flag accepted")
	}
}

func TestRedisEnvAlias(t *testing.T) {
	env := func(m map[string]string) func(string) (string, bool) {
		return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
	}
	for _, tt := range []struct {
		name string
		env  map[string]string
		want string
		err  string
	}{
		{"name", map[string]string{"VIGIL_REDIS_URL": "redis://a:1"}, "redis://a:1", ""},
		{"alias", map[string]string{"VIGIL_REDIS": "redis://b:1"}, "redis://b:1", ""},
		{"both, same", map[string]string{"VIGIL_REDIS_URL": "redis://a:1", "VIGIL_REDIS": "redis://a:1"}, "redis://a:1", ""},
		{"both, different", map[string]string{"VIGIL_REDIS_URL": "redis://a:1", "VIGIL_REDIS": "redis://b:1"}, "", "VIGIL_REDIS_URL and its alias VIGIL_REDIS"},
		{"none", map[string]string{}, "", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := Default()
			err := c.ApplyEnv(env(tt.env))
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil || c.Redis != tt.want {
				t.Fatalf("redis %q, err %v; want %q", c.Redis, err, tt.want)
			}
		})
	}
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	RegisterFlags(fs)
	if u := fs.Lookup("redis").Usage; !strings.Contains(u, "VIGIL_REDIS_URL") || strings.Contains(u, ",VIGIL_REDIS") {
		t.Errorf("--redis usage %q: want the documented variable only", u)
	}
}
