package health

import (
	"bytes"
	"encoding/json"
)

// The fields of an entry of the event stream (Keys.Events): its topic, its
// type, and data, the Event as JSON (its topic the entry's); optionally
// also.
const (
	EntryTopic = "topic"
	EntryType  = "type"
	EntryData  = "data"
	// EntryAlso names a second topic the entry is an event of. A job event
	// is written once, under the job's topic, with also = queue:jobs: a
	// reader delivers it under its topic and then under also, its data's
	// topic re-framed (Reframe), as if it were two entries (EntryEvents).
	// Workers before it wrote a job event twice, one entry per topic,
	// neither with also: such entries are one event each.
	EntryAlso = "also"
)

// EntryEvent is one event an entry of the stream stands for.
type EntryEvent struct {
	Topic string
	Type  string
	Data  []byte
	// Also marks the entry's second event: under its also topic, with
	// Data re-framed.
	Also bool
}

// EntryEvents returns the events of one stream entry, in their order: the
// entry under its topic, then, when it names another topic (also), the
// same event under that one. None when the entry has no topic or data;
// only the first when the second cannot be framed (data that is not a
// JSON object).
func EntryEvents(values map[string]any) []EntryEvent {
	topic, _ := values[EntryTopic].(string)
	typ, _ := values[EntryType].(string)
	data, _ := values[EntryData].(string)
	if topic == "" || data == "" {
		return nil
	}
	out := []EntryEvent{{Topic: topic, Type: typ, Data: []byte(data)}}
	if also := EntryAlsoTopic(values); also != "" {
		if d, ok := Reframe(out[0].Data, topic, also); ok {
			out = append(out, EntryEvent{Topic: also, Type: typ, Data: d, Also: true})
		}
	}
	return out
}

// EntryAlsoTopic returns the entry's also topic: "" when it has none, or
// names its own topic.
func EntryAlsoTopic(values map[string]any) string {
	also, _ := values[EntryAlso].(string)
	if topic, _ := values[EntryTopic].(string); also == topic {
		return ""
	}
	return also
}

// Reframe returns data, an Event as JSON under topic from, as the same
// event under topic to: the envelope's topic replaced, nothing else
// touched. An envelope that starts with its topic and ends with its brace
// (as json.Marshal of an Event writes it) is spliced, the rest as it is;
// any other is decoded and encoded again (its fields then sorted). false
// when data is not a JSON object.
func Reframe(data []byte, from, to string) ([]byte, bool) {
	f, _ := json.Marshal(from) // strings: cannot fail
	t, _ := json.Marshal(to)
	const head = `{"topic":`
	if len(data) > len(head)+len(f) && string(data[:len(head)]) == head && bytes.Equal(data[len(head):len(head)+len(f)], f) &&
		data[len(data)-1] == '}' {
		if c := data[len(head)+len(f)]; c == ',' || c == '}' {
			out := make([]byte, 0, len(data)-len(f)+len(t))
			out = append(out, head...)
			out = append(out, t...)
			return append(out, data[len(head)+len(f):]...), true
		}
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(data, &m) != nil || m == nil {
		return nil, false
	}
	m["topic"] = t
	out, err := json.Marshal(m)
	return out, err == nil
}
