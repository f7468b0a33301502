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
	// sent, if not nil, is told once whether Redis took the write (true:
	// written, or refused with an error, which no retry changes) or never
	// will (false: dropped). A write held while Redis is away is told
	// only once it is sent.
	sent chan bool
}

// answer tells r's waiter, if any, whether r was written.
func (r *writeReq) answer(written bool) {
	if r.sent != nil {
		r.sent <- written
		r.sent = nil
	}
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
// twice). One that Redis refuses is logged and dropped. A handler whose
// processing record is held waits for it: a handler that began with its
// record held and crashed the process would leave no record of its run,
// its crash would not count against the task, and a toxic task would run
// once more than job_crash_retries allows (TestHandlerBeginsOnlyOnRecord).
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
// what is still held (the handlers of the processing records among them
// wait).
func (b *batcher) send(held []writeReq) []writeReq {
	for len(held) > 0 && b.w.link.isUp() {
		n := min(len(held), maxBatch)
		if !b.flush(held[:n]) {
			break
		}
		held = held[n:]
	}
	defer func() { b.w.metrics.RecordsHeld.Store(int64(len(held))) }()
	if over := len(held) - maxHeldWrites; over > 0 {
		b.w.metrics.RecordsDropped.Add(int64(over))
		b.w.log.Error("redis away too long: oldest task records dropped", "dropped", over, "held", maxHeldWrites)
		for i := range held[:over] {
			held[i].answer(false)
		}
		held = append(held[:0], held[over:]...)
	}
	return held
}

// last sends what is held one last time, as the worker stops.
func (b *batcher) last(held []writeReq) {
	if held = b.send(held); len(held) > 0 {
		b.w.metrics.RecordsDropped.Add(int64(len(held)))
		b.w.log.Error("stopping with task records redis did not take", "dropped", len(held))
		for i := range held {
			held[i].answer(false)
		}
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
		batch[i].answer(true)
	}
	return true
}
