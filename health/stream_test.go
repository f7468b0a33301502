package health_test

import (
	"encoding/json"
	"testing"

	"github.com/vigil-dev/vigil/health"
)

// envelope is json.Marshal of the Event, as writers frame one.
func envelope(tb testing.TB, topic string, data string) []byte {
	tb.Helper()
	b, err := json.Marshal(health.Event{Topic: topic, Type: health.EventJob, Timestamp: 1790000000123, Data: json.RawMessage(data)})
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// Reframe gives exactly what the writer would have framed under the other
// topic: spliced when the envelope starts with its topic, decoded and
// encoded again otherwise (the same fields), refused for what is not an
// object.
func TestReframe(t *testing.T) {
	data := `{"queue":"q<&>","id":"id \"é\"\u2028","state":"done","error":"a\nb"}`
	for _, from := range []string{"job:q<&>:id \"é\"\u2028", "job:tag:0123", "queue:jobs"} {
		for _, to := range []string{"queue:jobs", "job:tag:0123", "x"} {
			got, ok := health.Reframe(envelope(t, from, data), from, to)
			if want := envelope(t, to, data); !ok || string(got) != string(want) {
				t.Errorf("Reframe(%q → %q): %v\n got %s\nwant %s", from, to, ok, got, want)
			}
		}
	}
	// Another writer's field order, or spaces: the same event.
	in := `{ "type":"job_update", "timestamp":1, "topic":"job:a:b", "data":{"id":"b"}, "extra":[1, 2] }`
	got, ok := health.Reframe([]byte(in), "job:a:b", "queue:jobs")
	var a, b map[string]any
	if !ok || json.Unmarshal(got, &a) != nil || json.Unmarshal([]byte(in), &b) != nil || a["topic"] != "queue:jobs" {
		t.Fatalf("Reframe of another order: %v %s", ok, got)
	}
	b["topic"] = "queue:jobs"
	if ga, _ := json.Marshal(a); string(ga) != string(must(json.Marshal(b))) {
		t.Errorf("Reframe of another order: %s, want the fields of %s", got, in)
	}
	// A topic that only starts like the envelope's is not spliced.
	got, ok = health.Reframe([]byte(`{"topic":"job:a:bc","type":"t"}`), "job:a:b", "queue:jobs")
	if !ok || string(got) != `{"topic":"queue:jobs","type":"t"}` {
		t.Errorf("Reframe of a longer topic: %v %s", ok, got)
	}
	for _, bad := range []string{`"x"`, `[1]`, `{"topic":"job:a:b",`, `not json`, `null`} {
		if got, ok := health.Reframe([]byte(bad), "job:a:b", "queue:jobs"); ok {
			t.Errorf("Reframe(%s) = %s, want refused", bad, got)
		}
	}
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}

// EntryEvents: an entry is one event, or two when it names another topic
// (also), the second re-framed; also naming its own topic, or data that
// cannot be re-framed, leave one.
func TestEntryEvents(t *testing.T) {
	own := string(envelope(t, "job:q:t", `{"id":"t"}`))
	cases := []struct {
		name   string
		values map[string]any
		want   []health.EntryEvent
	}{
		{"one topic", map[string]any{"topic": "job:q:t", "type": "job_update", "data": own},
			[]health.EntryEvent{{Topic: "job:q:t", Type: "job_update", Data: []byte(own)}}},
		{"also queue:jobs", map[string]any{"topic": "job:q:t", "type": "job_update", "data": own, "also": "queue:jobs"},
			[]health.EntryEvent{{Topic: "job:q:t", Type: "job_update", Data: []byte(own)},
				{Topic: "queue:jobs", Type: "job_update", Data: envelope(t, "queue:jobs", `{"id":"t"}`), Also: true}}},
		{"also its own topic", map[string]any{"topic": "job:q:t", "type": "job_update", "data": own, "also": "job:q:t"},
			[]health.EntryEvent{{Topic: "job:q:t", Type: "job_update", Data: []byte(own)}}},
		{"data not an object", map[string]any{"topic": "job:q:t", "type": "job_update", "data": "[]", "also": "queue:jobs"},
			[]health.EntryEvent{{Topic: "job:q:t", Type: "job_update", Data: []byte("[]")}}},
		{"no topic", map[string]any{"type": "job_update", "data": own, "also": "queue:jobs"}, nil},
		{"no data", map[string]any{"topic": "job:q:t", "type": "job_update", "also": "queue:jobs"}, nil},
	}
	for _, tc := range cases {
		got := health.EntryEvents(tc.values)
		if len(got) != len(tc.want) {
			t.Errorf("%s: %d events, want %d: %+v", tc.name, len(got), len(tc.want), got)
			continue
		}
		for i := range got {
			g, w := got[i], tc.want[i]
			if g.Topic != w.Topic || g.Type != w.Type || string(g.Data) != string(w.Data) || g.Also != w.Also {
				t.Errorf("%s: event %d: %+v (%s), want %+v (%s)", tc.name, i, g, g.Data, w, w.Data)
			}
		}
	}
}
