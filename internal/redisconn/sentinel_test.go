package redisconn

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/internal/testredis"
)

// TestSentinel runs a master with an ACL user and a Sentinel that monitors
// it: a redis-sentinel:// URL finds the master through the sentinel and logs
// in as the URL's user.
func TestSentinel(t *testing.T) {
	master := testredis.StartServer(t)
	ctx := context.Background()
	admin, err := Open(master.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if err := admin.Do(ctx, "ACL", "SETUSER", "vigil", "on", ">s3cret", "~*", "&*", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	port := testredis.FreePort(t)
	conf := filepath.Join(dir, "sentinel.conf")
	body := fmt.Sprintf("port %d\nbind 127.0.0.1\ndir %s\nsentinel monitor mymaster 127.0.0.1 %d 1\nsentinel auth-user mymaster vigil\nsentinel auth-pass mymaster s3cret\n",
		port, dir, master.Port)
	if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("redis-server", conf, "--sentinel")
	if err := cmd.Start(); err != nil {
		t.Skipf("cannot start redis-server --sentinel: %v", err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

	c, err := Open("redis-sentinel://vigil:s3cret@127.0.0.1:" + strconv.Itoa(port) + "/mymaster/0")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err = Ping(ctx, c, 500*time.Millisecond)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("ping through the sentinel: %v", err)
		}
		time.Sleep(50 * time.Millisecond) // waiting for an external process to listen
	}
	if err := c.Set(ctx, "through-sentinel", "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if v, _ := admin.Get(ctx, "through-sentinel").Result(); v != "1" {
		t.Fatalf("the write did not reach the master: %q", v)
	}
	if who, _ := c.Do(ctx, "ACL", "WHOAMI").Text(); who != "vigil" {
		t.Fatalf("logged in as %q", who)
	}
}
