package queue

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// maxBatch bounds how many task records one round trip carries.
const maxBatch = 256

// writeReq is one task's bookkeeping write.
type writeReq struct {
	what, task string
	fill       func(context.Context, redis.Pipeliner)
	sent       chan struct{} // closed once written, if not nil
}

// batcher sends the middleware's bookkeeping writes (running records,
// rolling averages, job events) from one goroutine, in order, pipelining
// whatever has queued up since its last round trip: under load many tasks
// share one round trip (a group commit). A task's processing record is
// waited for before its handler runs, so that a worker killed by the task
// leaves it on record; outcomes and progress are not waited for.
type batcher struct {
	w    *worker
	reqs chan writeReq
	done chan struct{}
}

func newBatcher(w *worker) *batcher {
	b := &batcher{w: w, reqs: make(chan writeReq, 4*maxBatch), done: make(chan struct{})}
	go b.run()
	return b
}

// add queues a write; it blocks only when maxBatch×4 writes are waiting.
func (b *batcher) add(r writeReq) { b.reqs <- r }

// close sends what is queued and stops. Call it once nothing adds any more.
func (b *batcher) close() {
	close(b.reqs)
	<-b.done
}

func (b *batcher) run() {
	defer close(b.done)
	batch := make([]writeReq, 0, maxBatch)
	for r := range b.reqs {
		batch = append(batch[:0], r)
	more:
		for len(batch) < maxBatch {
			select {
			case r, ok := <-b.reqs:
				if !ok {
					break more
				}
				batch = append(batch, r)
			default:
				break more
			}
		}
		b.flush(batch)
	}
}

func (b *batcher) flush(batch []writeReq) {
	ctx, cancel := opCtx(context.Background())
	defer cancel()
	pipe := b.w.rdb.Pipeline()
	for _, r := range batch {
		r.fill(ctx, pipe)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		if redis.HasErrorPrefix(err, "NOSCRIPT") {
			_ = avgScript.Load(ctx, b.w.rdb).Err()
		}
		for _, r := range batch {
			b.w.log.Warn("record task "+r.what, "task", r.task, "err", err)
		}
	}
	for _, r := range batch {
		if r.sent != nil {
			close(r.sent)
		}
	}
}
