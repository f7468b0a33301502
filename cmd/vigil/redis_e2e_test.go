package main

import (
	"context"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/vigil-dev/vigil/internal/testredis"
	"github.com/vigil-dev/vigil/queue"
)

// exercise runs what touches Redis in every way Vigil does: workers
// heartbeat, a job that crashes its worker comes back by the fast requeue
// and completes, another job completes, a queue pauses and resumes, and the
// API reads workers, queues and health.
func exercise(t *testing.T, e *e2e) {
	t.Helper()
	e.waitHealthy()
	r := e.events("$")
	crash := e.enqueue("demo:crash", 200)
	states := r.waitJob(crash, queue.StateDone)
	if !slices.Contains(states, queue.StateRequeuedStale) {
		t.Fatalf("crashing job went through %v: no requeued:stale", states)
	}
	e.waitHealthy() // the crashed worker was restarted
	work := e.enqueue("demo:work", 100)
	r.waitJob(work, queue.StateDone)
	e.do("POST", "/api/v1/queues/tag/pause", nil, http.StatusOK, nil)
	e.do("POST", "/api/v1/queues/tag/resume", nil, http.StatusOK, nil)
	for _, path := range []string{"/api/v1/workers", "/api/v1/queues", "/api/v1/queues/tag", "/api/v1/health", "/api/v1/hosts", "/readyz"} {
		e.do("GET", path, nil, http.StatusOK, nil)
	}
}

// TestServeWithACLUser runs a supervisor and its workers against a Redis
// whose default user is off: every process must log in as the URL's ACL
// user (the workers get the URL as VIGIL_REDIS_URL).
func TestServeWithACLUser(t *testing.T) {
	srv := testredis.StartServer(t)
	ctx := context.Background()
	admin := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + strconv.Itoa(srv.Port)})
	defer admin.Close()
	if err := admin.Do(ctx, "ACL", "SETUSER", "vigil", "on", ">s3cret", "~*", "&*", "+@all").Err(); err != nil {
		t.Fatalf("ACL SETUSER: %v", err)
	}
	if err := admin.Do(ctx, "ACL", "SETUSER", "default", "off").Err(); err != nil {
		t.Fatalf("ACL SETUSER default off: %v", err)
	}
	e := startServe(t, e2eConfig(t, "redis://vigil:s3cret@127.0.0.1:"+strconv.Itoa(srv.Port)+"/0", 2))
	exercise(t, e)
	if strings.Contains(e.logs.String(), "s3cret") {
		t.Error("the log shows the Redis password")
	}
}

// TestServeOnRedisCluster runs a supervisor, its workers, the fast requeue,
// pause/resume and the event stream on a local 3-node Redis Cluster
// (docs/design.md §9: miniredis cannot see CROSSSLOT errors). Integration suite
// only (make test-redis).
func TestServeOnRedisCluster(t *testing.T) {
	c := testredis.StartCluster(t)
	e := startServe(t, e2eConfig(t, c.URL, 2))
	exercise(t, e)
	logs := e.logs.String()
	if !strings.Contains(logs, `"redis":"cluster 127.0.0.1:`) {
		t.Errorf("serve did not say it runs on the cluster:\n%s", grepLines(logs, "vigil running"))
	}
	for _, bad := range []string{"CROSSSLOT", "MOVED", "non local key", "cross slot"} {
		if strings.Contains(logs, bad) {
			t.Errorf("log mentions %s:\n%s", bad, grepLines(logs, bad))
		}
	}
}

func grepLines(s, sub string) string {
	var out []string
	for l := range strings.SplitSeq(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
