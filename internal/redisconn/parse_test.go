package redisconn

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestParseForms(t *testing.T) {
	tests := []struct {
		url   string
		kind  Kind
		check func(t *testing.T, o *Options)
	}{
		{"redis://127.0.0.1:6379/2", Standalone, func(t *testing.T, o *Options) {
			if o.Simple.Addr != "127.0.0.1:6379" || o.Simple.DB != 2 || o.Simple.TLSConfig != nil {
				t.Fatalf("%+v", o.Simple)
			}
		}},
		{"redis://vigil:s3cret@h:7000/0?dial_timeout=3s", Standalone, func(t *testing.T, o *Options) {
			if o.Simple.Username != "vigil" || o.Simple.Password != "s3cret" || o.Simple.DialTimeout != 3*time.Second {
				t.Fatalf("%+v", o.Simple)
			}
		}},
		{"rediss://h:6380/0", Standalone, func(t *testing.T, o *Options) {
			if o.Simple.TLSConfig == nil || o.Simple.TLSConfig.ServerName != "h" {
				t.Fatalf("no TLS: %+v", o.Simple)
			}
		}},
		{"redis-sentinel://u:p@s1:26379,s2,s3:26381/mymaster/3?sentinel_password=sp", Sentinel, func(t *testing.T, o *Options) {
			f := o.Failover
			if f.MasterName != "mymaster" || f.DB != 3 || f.Username != "u" || f.Password != "p" || f.SentinelPassword != "sp" {
				t.Fatalf("%+v", f)
			}
			if strings.Join(f.SentinelAddrs, ",") != "s1:26379,s2:26379,s3:26381" {
				t.Fatalf("sentinels %v", f.SentinelAddrs)
			}
			if f.TLSConfig != nil {
				t.Fatal("TLS on redis-sentinel://")
			}
		}},
		{"rediss-sentinel://s1/m", Sentinel, func(t *testing.T, o *Options) {
			if o.Failover.TLSConfig == nil || o.Failover.DB != 0 {
				t.Fatalf("%+v", o.Failover)
			}
		}},
		{"redis-cluster://u:p@n1:7000,n2:7001,n3?read_timeout=2s", Cluster, func(t *testing.T, o *Options) {
			c := o.Cluster
			if strings.Join(c.Addrs, ",") != "n1:7000,n2:7001,n3:6379" || c.Username != "u" || c.Password != "p" || c.ReadTimeout != 2*time.Second {
				t.Fatalf("%+v", c)
			}
		}},
		{"rediss-cluster://n1:7000?skip_verify=true", Cluster, func(t *testing.T, o *Options) {
			if o.Cluster.TLSConfig == nil || !o.Cluster.TLSConfig.InsecureSkipVerify {
				t.Fatalf("%+v", o.Cluster.TLSConfig)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.url, func(t *testing.T) {
			o, err := Parse(tt.url)
			if err != nil {
				t.Fatal(err)
			}
			if o.Kind != tt.kind {
				t.Fatalf("kind %s, want %s", o.Kind, tt.kind)
			}
			tt.check(t, o)
			c := o.Client()
			_ = c.Close()
		})
	}
}

func TestParseRejects(t *testing.T) {
	tests := []struct{ url, want string }{
		{"127.0.0.1:6379", "no scheme"},
		{"http://h:1", "unknown scheme"},
		{"redis-sentinel://s1:26379", "master name"},
		{"redis-sentinel://s1/m/x", "not a number"},
		{"redis-cluster://n1:7000/0", "no databases"},
		{"redis-cluster://n1:7000?bogus=1", "unexpected option"},
		{"redis://h:1/0?ca_file=/x", "for TLS"},
		{"rediss://h:1/0?ca_file=/does/not/exist", "ca_file"},
		{"redis-cluster://:pw@/", "no host"},
	}
	for _, tt := range tests {
		t.Run(tt.url, func(t *testing.T) {
			_, err := Parse(tt.url)
			if !errors.Is(err, ErrURL) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err %v, want ErrURL mentioning %q", err, tt.want)
			}
		})
	}
}

func TestRedactAndDescribe(t *testing.T) {
	for _, u := range []string{
		"redis://vigil:s3cret@h:1/0",
		"redis-sentinel://u:s3cret@s1/m?sentinel_password=s3cret",
		"redis-cluster://u:s3cret@n1:7000,n2:7001",
	} {
		if r := Redact(u); strings.Contains(r, "s3cret") {
			t.Errorf("Redact(%s) = %s", u, r)
		}
		if d := Describe(u); strings.Contains(d, "s3cret") {
			t.Errorf("Describe(%s) = %s", u, d)
		}
	}
	if d := Describe("redis-cluster://n1:7000,n2:7001,n3:7002"); d != "cluster n1:7000 (+2)" {
		t.Errorf("Describe cluster = %q", d)
	}
	if d := Describe("redis-sentinel://s1/mymaster"); d != "sentinel mymaster via s1:26379" {
		t.Errorf("Describe sentinel = %q", d)
	}
	// A URL error must not carry the password either.
	_, err := Parse("redis://u:s3cret@h:1/0?bogus=1")
	if err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("error %v", err)
	}
}

func TestRedactKeepsTheRest(t *testing.T) {
	got := Redact("redis-cluster://u:pw@n1:7000,n2?read_timeout=2s")
	if got != "redis-cluster://u:xxxxx@n1:7000,n2?read_timeout=2s" {
		t.Fatalf("Redact = %q", got)
	}
	if got := Redact("redis://h:1/0"); got != "redis://h:1/0" {
		t.Fatalf("Redact = %q", got)
	}
}

func TestHasPasswordAndSkipsVerify(t *testing.T) {
	for u, want := range map[string]bool{
		"redis://127.0.0.1/0": false, "redis://user@h/0": false, "redis://:pw@h/0": true, "redis://u:p@h1/0": true,
		"redis-sentinel://h1,h2/m?sentinel_password=x": true, "redis://:Pa%ZZ@h/0": true, "": false,
	} {
		if got := HasPassword(u); got != want {
			t.Errorf("HasPassword(%q) = %v", u, got)
		}
	}
	for u, want := range map[string]bool{"rediss://h/0?skip_verify=true": true, "rediss://h/0?skip_verify=false": false, "rediss://h/0": false} {
		if got := SkipsVerify(u); got != want {
			t.Errorf("SkipsVerify(%q) = %v", u, got)
		}
	}
}

func TestUsesTLS(t *testing.T) {
	for u, want := range map[string]bool{
		"redis://h:1/0": false, "rediss://h:1/0": true, "redis-sentinel://s/m": false,
		"rediss-sentinel://s/m": true, "redis-cluster://a,b": false, "rediss-cluster://a,b": true, "": false,
	} {
		if got := UsesTLS(u); got != want {
			t.Errorf("UsesTLS(%q) = %v, want %v", u, got, want)
		}
	}
}

func TestAddrNamesSentinels(t *testing.T) {
	c, err := Open("redis-sentinel://127.0.0.1:1,127.0.0.1:2/mymaster/0")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got, want := Addr(c), "sentinel mymaster via 127.0.0.1:1 (+1)"; got != want {
		t.Errorf("Addr = %q, want %q", got, want)
	}
}
