package queue

import (
	"encoding/json"
	"testing"

	"github.com/vigil-dev/vigil/health"
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
