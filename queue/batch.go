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

// maxHeldWrites bounds the bookkeeping writes held while Redis is away;
// past it the oldest are dropped (counted in RecordsDropped).
const maxHeldWrites = 10_000

// batcher sends the middleware's bookkeeping writes (running records,
// rolling averages, job events) from one goroutine, in order, pipelining
// whatever has queued up since its last round trip: under load many tasks
// share one round trip (a group commit). A task's processing record is
// waited for before its handler runs, so that a worker killed by the task
// leaves it on record; outcomes and progress are not waited for.
//
// While the worker cannot reach Redis (the link is not up) the writes are
// held, in order, and sent once it is; a round trip that gets no reply is
// held too (sent again: an event whose reply was lost may then appear
// twice). One that Redis refuses is logged and dropped.
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
	var held []writeReq
	for {
		var up <-chan struct{}
		if len(held) > 0 {
			up = b.w.link.up()
		}
		select {
		case r, ok := <-b.reqs:
			if !ok {
				b.last(held)
				return
			}
			held = append(held, r)
		more:
			for len(held) < maxHeldWrites {
				select {
				case r, ok := <-b.reqs:
					if !ok {
						b.last(held)
						return
					}
					held = append(held, r)
				default:
					break more
				}
			}
		case <-up:
		}
		held = b.send(held)
	}
}

// send writes held, maxBatch at a time, while the link is up; it returns
// what is still held (the processing records among them are not waited
// for: their handlers go on).
func (b *batcher) send(held []writeReq) []writeReq {
	for len(held) > 0 && b.w.link.isUp() {
		n := min(len(held), maxBatch)
		if !b.flush(held[:n]) {
			break
		}
		held = held[n:]
	}
	for i := range held {
		if held[i].sent != nil {
			close(held[i].sent)
			held[i].sent = nil
		}
	}
	if over := len(held) - maxHeldWrites; over > 0 {
		b.w.metrics.RecordsDropped.Add(int64(over))
		b.w.log.Error("redis away too long: oldest task records dropped", "dropped", over, "held", maxHeldWrites)
		held = append(held[:0], held[over:]...)
	}
	return held
}

// last sends what is held one last time, as the worker stops.
func (b *batcher) last(held []writeReq) {
	if held = b.send(held); len(held) > 0 {
		b.w.metrics.RecordsDropped.Add(int64(len(held)))
		b.w.log.Error("stopping with task records redis did not take", "dropped", len(held))
	}
}

// flush sends one batch; false when no reply came (the batch is to be
// held and sent again).
func (b *batcher) flush(batch []writeReq) bool {
	ctx, cancel := opCtx(context.Background())
	defer cancel()
	pipe := b.w.rdb.Pipeline()
	for _, r := range batch {
		r.fill(ctx, pipe)
	}
	_, err := pipe.Exec(ctx)
	if err != nil && faultOf(err) == faultNoAnswer {
		return false
	}
	if err != nil {
		if redis.HasErrorPrefix(err, "NOSCRIPT") {
			_ = avgScript.Load(ctx, b.w.rdb).Err()
		}
		for _, r := range batch {
			b.w.log.Warn("record task "+r.what, "task", r.task, "err", err)
		}
	}
	for i := range batch {
		if batch[i].sent != nil {
			close(batch[i].sent)
			batch[i].sent = nil
		}
	}
	return true
}
