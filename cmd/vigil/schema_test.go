package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/vigil-dev/vigil/internal/testredis"
)

// vigil serve refuses a Redis whose key layout is newer than it knows, in
// one line saying what to do, before writing anything.
func TestServeRefusesNewerSchema(t *testing.T) {
	env := testredis.New(t)
	if err := env.Client.Set(context.Background(), env.Prefix+"schema", 99, 0).Err(); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	code := run([]string{"serve", "--redis", env.URL, "--prefix", env.Prefix, "--listen", "127.0.0.1:0"}, &out, &errb)
	msg := strings.TrimSpace(errb.String())
	last := msg[strings.LastIndex(msg, "\n")+1:]
	if code != 1 || !strings.Contains(last, "newer vigil key layout") || !strings.Contains(last, "upgrade vigil") {
		t.Fatalf("exit %d, stderr:\n%s", code, msg)
	}
	keys, _ := env.Client.Keys(context.Background(), env.Prefix+"*").Result()
	if len(keys) != 1 {
		t.Fatalf("serve wrote keys: %v", keys)
	}
}
