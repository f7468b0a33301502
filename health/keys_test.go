package health_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/vigil-dev/vigil/health"
)

func TestKeys(t *testing.T) {
	c := health.ComponentID{Queue: "tag", Slot: 0}
	tests := []struct {
		prefix string
		name   string
		got    func(health.Keys) string
		want   string
	}{
		{"", "hb", func(k health.Keys) string { return k.Heartbeat(c) }, "vigil:hb:{worker:tag:0}"},
		{"", "component", func(k health.Keys) string { return k.Component(c) }, "vigil:component:{worker:tag:0}"},
		{"", "running", func(k health.Keys) string { return k.Running(c) }, "vigil:running:{worker:tag:0}"},
		{"", "restarts", func(k health.Keys) string { return k.Restarts(c) }, "vigil:restarts:{worker:tag:0}"},
		{"", "crashes", func(k health.Keys) string { return k.Crashes(c) }, "vigil:restarts:{worker:tag:0}:crashes"},
		{"", "slot", func(k health.Keys) string { return k.Slot(c) }, "vigil:slot:{worker:tag:0}"},
		{"", "components", health.Keys.Components, "vigil:components"},
		{"", "control", health.Keys.Control, "vigil:control"},
		{"", "host", func(k health.Keys) string { return k.Host("box-1") }, "vigil:host:{box-1}"},
		{"", "hosts", health.Keys.Hosts, "vigil:hosts"},
		{"", "leader", health.Keys.Leader, "vigil:leader"},
		{"", "events", health.Keys.Events, "vigil:events"},
		{"", "job crashes", func(k health.Keys) string { return k.JobCrashes("tag", "4f1c") }, "vigil:job:{tag}:4f1c:crashes"},
		{"", "schema", health.Keys.Schema, "vigil:schema"},
		{"", "schedules", health.Keys.Schedules, "vigil:schedules"},
		{"", "schedule", func(k health.Keys) string { return k.Schedule("tag", "nightly") }, "vigil:schedule:{tag}:nightly"},
		{"", "session", func(k health.Keys) string { return k.Session("0f3a") }, "vigil:session:0f3a"},
		{"acme:", "custom prefix", func(k health.Keys) string { return k.Heartbeat(health.ComponentID{Queue: "library", Slot: 12}) }, "acme:hb:{worker:library:12}"},
		{"acme:", "custom prefix events", health.Keys.Events, "acme:events"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.got(health.NewKeys(tt.prefix)); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

// A component's keys must share one Redis Cluster hash slot: the hash tag
// (text between the first "{" and the next "}") is the same for all.
func TestKeysShareHashTag(t *testing.T) {
	k := health.NewKeys("")
	c := health.ComponentID{Queue: "calibration", Slot: 4}
	want := c.String()
	for _, key := range []string{k.Heartbeat(c), k.Component(c), k.Running(c), k.Restarts(c), k.Crashes(c), k.Slot(c)} {
		if got := hashTag(key); got != want {
			t.Errorf("hash tag of %q = %q, want %q", key, got, want)
		}
	}
	// A schedule's record shares its queue's slot with asynq:{<q>}:….
	if got := hashTag(k.Schedule("calibration", "nightly")); got != "calibration" {
		t.Errorf("hash tag of a schedule = %q, want %q", got, "calibration")
	}
	// A task's crash counter shares its queue's slot with asynq:{<q>}:….
	if got := hashTag(k.JobCrashes("calibration", "t1")); got != "calibration" {
		t.Errorf("hash tag of job crashes = %q, want %q", got, "calibration")
	}
}

func hashTag(key string) string {
	_, rest, ok := strings.Cut(key, "{")
	if !ok {
		return ""
	}
	tag, _, ok := strings.Cut(rest, "}")
	if !ok {
		return ""
	}
	return tag
}

func TestComponentIDStringAndTopic(t *testing.T) {
	c := health.ComponentID{Queue: "tag", Slot: 7}
	if got := c.String(); got != "worker:tag:7" {
		t.Errorf("String = %q", got)
	}
	if got := c.Topic(); got != "worker:tag:7:status" {
		t.Errorf("Topic = %q", got)
	}
}

func TestParseComponentID(t *testing.T) {
	valid := []struct {
		in   string
		want health.ComponentID
	}{
		{"worker:tag:0", health.ComponentID{Queue: "tag", Slot: 0}},
		{"worker:library:9", health.ComponentID{Queue: "library", Slot: 9}},
		{"worker:a-b_c9:42", health.ComponentID{Queue: "a-b_c9", Slot: 42}},
		{"worker:0:999999", health.ComponentID{Queue: "0", Slot: health.MaxSlot - 1}},
		{"worker:" + strings.Repeat("q", 63) + ":1", health.ComponentID{Queue: strings.Repeat("q", 63), Slot: 1}},
	}
	for _, tt := range valid {
		got, err := health.ParseComponentID(tt.in)
		if err != nil {
			t.Errorf("ParseComponentID(%q): %v", tt.in, err)
			continue
		}
		if got != tt.want {
			t.Errorf("ParseComponentID(%q) = %+v, want %+v", tt.in, got, tt.want)
		}
		if got.String() != tt.in {
			t.Errorf("ParseComponentID(%q).String() = %q", tt.in, got.String())
		}
	}

	invalid := []string{
		"",
		"worker:../x",
		"worker:tag:-1",
		"worker:tag:01",
		"worker:tag:+1",
		"worker:tag: 1",
		"worker:tag:1 ",
		"worker:tag:1.0",
		"worker:tag:0x1",
		"worker:tag:1000000", // MaxSlot
		"worker:tag:99999999999999999999999",
		"worker:tag:",
		"worker:tag",
		"worker::0",
		"worker:TAG:0",
		"worker:a:b:0",
		"worker:{x}:0",
		"worker:ta}g:0",
		"worker:ta g:0",
		"worker:-tag:0",
		"worker:tag\n:0",
		"worker:tag:0\n",
		"worker:" + strings.Repeat("q", 64) + ":0",
		"Worker:tag:0",
		"app:tag:0",
		"tag:0",
		":worker:tag:0",
		"worker:" + strings.Repeat("a", 10<<10) + ":0",
	}
	for _, in := range invalid {
		got, err := health.ParseComponentID(in)
		if err == nil {
			t.Errorf("ParseComponentID(%.40q) = %+v, want an error", in, got)
			continue
		}
		if !errors.Is(err, health.ErrInvalidName) {
			t.Errorf("ParseComponentID(%.40q): error %v is not ErrInvalidName", in, err)
		}
		if got != (health.ComponentID{}) {
			t.Errorf("ParseComponentID(%.40q) returned %+v with its error", in, got)
		}
		// Errors end up in API answers and logs: they must not echo a huge
		// input back.
		if len(err.Error()) > 300 {
			t.Errorf("ParseComponentID(%.40q): error is %d bytes long", in, len(err.Error()))
		}
	}
}

func TestCheckName(t *testing.T) {
	tests := []struct {
		in string
		ok bool
	}{
		{"a", true},
		{"0", true},
		{"tag", true},
		{"a-b_c", true},
		{"9lives", true},
		{strings.Repeat("a", 63), true},
		{"a" + strings.Repeat("-", 62), true},
		{strings.Repeat("a", 64), false},
		{"", false},
		{"-a", false},
		{"_a", false},
		{"Tag", false},
		{"a:b", false},
		{"a{b", false},
		{"a}b", false},
		{"a.b", false},
		{"a/b", false},
		{"../x", false},
		{"a b", false},
		{"a\n", false},
		{"\na", false},
		{"é", false},
		{"a*", false},
	}
	for _, tt := range tests {
		err := health.CheckName("queue", tt.in)
		if got := err == nil; got != tt.ok {
			t.Errorf("CheckName(%q) = %v, want ok=%v", tt.in, err, tt.ok)
		}
		if got := health.ValidName(tt.in); got != tt.ok {
			t.Errorf("ValidName(%q) = %v, want %v", tt.in, got, tt.ok)
		}
		if err != nil {
			if !errors.Is(err, health.ErrInvalidName) {
				t.Errorf("CheckName(%q): %v is not ErrInvalidName", tt.in, err)
			}
			if !strings.Contains(err.Error(), "queue") {
				t.Errorf("CheckName(%q): %q does not say what was checked", tt.in, err)
			}
		}
	}
}
