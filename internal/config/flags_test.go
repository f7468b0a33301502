package config

import (
	"flag"
	"io"
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
