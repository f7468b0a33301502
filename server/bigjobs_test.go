package server_test

import (
	"bytes"
	"net/http"
	"runtime"
	"runtime/metrics"
	"strconv"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/vigil-dev/vigil/server"
)

// enqueueBig puts n tasks with payloads of size bytes in h's first queue
// straight through asynq (the API caps what it accepts, producers need
// not go through it).
func enqueueBig(tb testing.TB, h *harness, n, size int, archived bool) []string {
	tb.Helper()
	c := asynq.NewClientFromRedisClient(h.redis.Client)
	payload := bytes.Repeat([]byte("x"), size)
	payload[0], payload[len(payload)-1] = '"', '"' // a JSON string
	var ids []string
	for range n {
		opts := []asynq.Option{asynq.Queue(h.q1), asynq.MaxRetry(0)}
		if archived {
			opts = append(opts, asynq.Retention(0))
		}
		info, err := c.Enqueue(asynq.NewTask("big", payload), opts...)
		if err != nil {
			tb.Fatal(err)
		}
		ids = append(ids, info.ID)
	}
	return ids
}

// TestJobListsShowPayloadPreviews: a page of jobs with 1 MiB payloads
// holds previews of them, marked payload_truncated with the full size,
// and the page's response stays small; a job's detail has the payload up
// to the configured cap (issue 18, row 5: one GET of 150 such jobs
// answered 157 MB).
func TestJobListsShowPayloadPreviews(t *testing.T) {
	h := newHarness(t, setup{cfg: func(c *server.Config) { c.MaxPayloadShown = 512 << 10 }})
	ids := enqueueBig(t, h, 20, 1<<20, false)
	small := decode[server.Job](t, h.post("/api/v1/queues/"+h.q1+"/jobs", `{"type":"small","payload":{"a":1}}`), http.StatusCreated)

	rec := h.get("/api/v1/queues/" + h.q1 + "/jobs?page_size=100")
	if n := rec.Body.Len(); n > 100<<10 {
		t.Errorf("a page of 21 jobs, 20 of them of 1 MiB: %d bytes answered, want under 100 KiB", n)
	}
	list := decode[jobsBody](t, rec, http.StatusOK)
	if len(list.Jobs) != 21 {
		t.Fatalf("%d jobs listed, want 21", len(list.Jobs))
	}
	for _, j := range list.Jobs {
		switch j.ID {
		case small.ID:
			if j.PayloadTruncated || string(j.Payload) != `{"a":1}` {
				t.Errorf("small job listed as %+v", j)
			}
		default:
			if !j.PayloadTruncated || j.PayloadSize != 1<<20 || len(j.PayloadPreview) == 0 || len(j.PayloadPreview) > server.PayloadPreviewDefault || j.Payload != nil {
				t.Errorf("big job %s listed with payload %d bytes, preview %d bytes, truncated %v, size %d", j.ID, len(j.Payload), len(j.PayloadPreview), j.PayloadTruncated, j.PayloadSize)
			}
		}
	}
	d := decode[server.Job](t, h.get("/api/v1/jobs/"+h.q1+"/"+ids[0]), http.StatusOK)
	if !d.PayloadTruncated || d.PayloadSize != 1<<20 || len(d.PayloadPreview) != 512<<10 {
		t.Errorf("detail of a 1 MiB job with a 512 KiB cap: preview %d bytes, truncated %v, size %d", len(d.PayloadPreview), d.PayloadTruncated, d.PayloadSize)
	}
	d = decode[server.Job](t, h.get("/api/v1/jobs/"+h.q1+"/"+small.ID), http.StatusOK)
	if d.PayloadTruncated || string(d.Payload) != `{"a":1}` {
		t.Errorf("detail of a small job: %+v", d)
	}
}

// BenchmarkListBigJobs: one GET of a page of 150 jobs of 1 MiB (issue 18,
// row 5). resp-bytes is the answer's size; peak-heap-MB the most the heap
// grew over its level before the request (sampled every millisecond), on
// a real Redis (VIGIL_TEST_REDIS_URL) the server's own.
func BenchmarkListBigJobs(b *testing.B) {
	h := newHarness(b, setup{})
	n := 150
	if testing.Short() {
		n = 20
	}
	enqueueBig(b, h, n, 1<<20, false)
	path := "/api/v1/queues/" + h.q1 + "/jobs?page_size=" + strconv.Itoa(n)
	b.ReportAllocs()
	var size int
	var peak uint64
	for b.Loop() {
		runtime.GC()
		base := heapBytes()
		stop, done := make(chan struct{}), make(chan uint64)
		go func() {
			var top uint64
			t := time.NewTicker(time.Millisecond)
			defer t.Stop()
			for {
				top = max(top, heapBytes())
				select {
				case <-stop:
					done <- top
					return
				case <-t.C:
				}
			}
		}()
		rec := h.get(path)
		close(stop)
		if top := <-done; top > base {
			peak = max(peak, top-base)
		}
		if rec.Code != http.StatusOK {
			b.Fatalf("%d %.200s", rec.Code, rec.Body)
		}
		size = rec.Body.Len()
	}
	b.ReportMetric(float64(size), "resp-bytes")
	b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MB")
}

// heapBytes is the heap's live and not yet swept objects.
func heapBytes() uint64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}
