package queue

import (
	"context"
	"encoding/json"
	"maps"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/health"
	"github.com/vigil-dev/vigil/internal/testredis"
)

// jobEnvelope writes what json.Marshal of the health.Event writes, for
// topics that need escaping too.
func TestJobEnvelope(t *testing.T) {
	p := 42.5
	data, _ := json.Marshal(JobEvent{Queue: "q<&>", ID: "id \"é\"\u2028", State: StateProgress, Progress: &p, Error: "a\nb"})
	for _, topic := range []string{TopicJobs, JobTopic("q<&>", "id \"é\"\u2028"), JobTopic("tag", "0123")} {
		for _, ms := range []int64{0, 1790000000123, -5} {
			want, err := json.Marshal(health.Event{Topic: topic, Type: health.EventJob, Timestamp: ms, Data: data})
			if err != nil {
				t.Fatal(err)
			}
			if got := jobEnvelope(topic, ms, data); got != string(want) {
				t.Errorf("jobEnvelope(%q, %d)\n got %s\nwant %s", topic, ms, got, want)
			}
		}
	}
}

// A job event is one stream entry: under the job's topic, also queue:jobs
// (health.EntryAlso), framed as json.Marshal frames the Event; readers
// make the queue:jobs event of it. Before, two entries (four XADDs per
// task).
func TestJobEventsOneEntry(t *testing.T) {
	env := testredis.New(t)
	store := health.NewStore(env.Client, env.Prefix, 0)
	ctx := context.Background()
	at := time.UnixMilli(1790000000123)
	e := JobEvent{Queue: "tag", ID: "t1", Type: "demo:work", State: StateDone, MaxRetry: 3, DurationMS: 12}
	pipe := env.Client.Pipeline()
	jobEvents(ctx, store, pipe, at, e)
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	msgs, err := env.Client.XRange(ctx, store.Keys().Events(), "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 1 {
		t.Fatalf("%d entries, want 1: %v", len(msgs), msgs)
	}
	data, _ := json.Marshal(e)
	env0, _ := json.Marshal(health.Event{Topic: JobTopic("tag", "t1"), Type: health.EventJob, Timestamp: at.UnixMilli(), Data: data})
	want := map[string]any{"topic": JobTopic("tag", "t1"), "type": health.EventJob, "data": string(env0), "also": TopicJobs}
	if !maps.Equal(msgs[0].Values, want) {
		t.Errorf("entry %v\nwant %v", msgs[0].Values, want)
	}
	evs := health.EntryEvents(msgs[0].Values)
	env1, _ := json.Marshal(health.Event{Topic: TopicJobs, Type: health.EventJob, Timestamp: at.UnixMilli(), Data: data})
	if len(evs) != 2 || evs[1].Topic != TopicJobs || string(evs[1].Data) != string(env1) {
		t.Errorf("its events %+v, want the second on queue:jobs as %s", evs, env1)
	}
}
