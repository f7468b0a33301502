package schedule_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/schedule"
)

func utc(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		panic(err)
	}
	return t.UTC()
}

// ticks lists the ticks of spec in (from, to].
func ticks(t *testing.T, spec string, from, to time.Time) []string {
	t.Helper()
	s, err := schedule.ParseSpec(spec, true)
	if err != nil {
		t.Fatalf("ParseSpec(%q): %v", spec, err)
	}
	var out []string
	for x := s.Next(from); !x.IsZero() && !x.After(to); x = s.Next(x) {
		out = append(out, x.UTC().Format(time.RFC3339Nano))
	}
	return out
}

// TestSpecDST pins the ticks around daylight-saving changes: the instants
// robfig/cron gives in the spec's zone. A local time that does not exist
// (spring forward) has no tick that day; one that occurs twice (fall back)
// has two, an hour apart; an hourly spec ticks every real hour.
func TestSpecDST(t *testing.T) {
	tests := []struct {
		name, spec, from, to string
		want                 []string
	}{
		{"spring forward: 02:30 does not exist on 8 March", "CRON_TZ=America/New_York 30 2 * * *",
			"2026-03-07T00:00:00Z", "2026-03-10T00:00:00Z",
			[]string{"2026-03-07T07:30:00Z", "2026-03-09T06:30:00Z"}},
		{"fall back: 01:30 occurs twice on 1 November", "CRON_TZ=America/New_York 30 1 * * *",
			"2026-10-31T00:00:00Z", "2026-11-02T12:00:00Z",
			[]string{"2026-10-31T05:30:00Z", "2026-11-01T05:30:00Z", "2026-11-01T06:30:00Z", "2026-11-02T06:30:00Z"}},
		{"fall back: hourly ticks every real hour", "CRON_TZ=America/New_York 0 * * * *",
			"2026-11-01T04:30:00Z", "2026-11-01T07:30:00Z",
			[]string{"2026-11-01T05:00:00Z", "2026-11-01T06:00:00Z", "2026-11-01T07:00:00Z"}},
		{"spring forward: hourly skips the missing hour", "CRON_TZ=America/New_York 0 * * * *",
			"2026-03-08T05:30:00Z", "2026-03-08T08:30:00Z",
			[]string{"2026-03-08T06:00:00Z", "2026-03-08T07:00:00Z", "2026-03-08T08:00:00Z"}},
		{"Europe: 02:30 on the spring-forward day", "CRON_TZ=Europe/Paris 30 2 * * *",
			"2026-03-28T00:00:00Z", "2026-03-31T00:00:00Z",
			[]string{"2026-03-28T01:30:00Z", "2026-03-30T00:30:00Z"}},
		{"no zone is UTC, not the host's", "30 2 * * *",
			"2026-03-07T00:00:00Z", "2026-03-09T00:00:00Z",
			[]string{"2026-03-07T02:30:00Z", "2026-03-08T02:30:00Z"}},
		{"@every is aligned to the epoch, whatever the zone", "CRON_TZ=Asia/Kolkata @every 90m",
			"2026-03-07T00:00:00Z", "2026-03-07T04:00:00Z",
			[]string{"2026-03-07T01:30:00Z", "2026-03-07T03:00:00Z"}},
		{"seconds field", "*/20 * * * * *", "2026-03-07T00:00:00Z", "2026-03-07T00:01:00Z",
			[]string{"2026-03-07T00:00:20Z", "2026-03-07T00:00:40Z", "2026-03-07T00:01:00Z"}},
		{"sub-second @every", "@every 250ms", "2026-03-07T00:00:00.1Z", "2026-03-07T00:00:00.8Z",
			[]string{"2026-03-07T00:00:00.25Z", "2026-03-07T00:00:00.5Z", "2026-03-07T00:00:00.75Z"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ticks(t, tt.spec, utc(tt.from), utc(tt.to))
			if strings.Join(got, " ") != strings.Join(tt.want, " ") {
				t.Errorf("ticks of %q in (%s, %s]:\n got %v\nwant %v", tt.spec, tt.from, tt.to, got, tt.want)
			}
		})
	}
}

func TestParseSpecRefuses(t *testing.T) {
	tests := []struct {
		spec, want string
		tooFast    bool
	}{
		{"", "empty", false},
		{"61 * * * *", "above maximum", false},
		{"* * *", "expected", false},
		{"CRON_TZ=Mars/Olympus 0 * * * *", "unknown time zone", false},
		{"CRON_TZ=Local 0 * * * *", "IANA", false},
		{"TZ= 0 * * * *", "IANA", false},
		{"CRON_TZ=UTC", "no schedule", false},
		{"@every 500ms", "faster than once a second", true},
		{"@every soon", "invalid duration", false},
		{"@every -1s", "faster", true},
		{"@fortnightly", "unrecognized descriptor", false},
		{strings.Repeat("1", 300), "longer than", false},
	}
	for _, tt := range tests {
		_, err := schedule.ParseSpec(tt.spec, false)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ParseSpec(%q) = %v, want an error saying %q", tt.spec, err, tt.want)
		}
		if errors.Is(err, schedule.ErrTooFast) != tt.tooFast {
			t.Errorf("ParseSpec(%q): ErrTooFast is %v, want %v", tt.spec, errors.Is(err, schedule.ErrTooFast), tt.tooFast)
		}
	}
	for _, spec := range []string{"@every 1s", "* * * * * *", "@hourly", "TZ=Europe/Paris @daily", "CRON_TZ=UTC 0 9 * * MON-FRI"} {
		if _, err := schedule.ParseSpec(spec, false); err != nil {
			t.Errorf("ParseSpec(%q): %v", spec, err)
		}
	}
	if _, err := schedule.ParseSpec("@every 500ms", true); err != nil {
		t.Errorf("@every 500ms with allow_subsecond: %v", err)
	}
	if _, err := schedule.ParseSpec("@every 1ms", true); err == nil {
		t.Error("@every 1ms accepted even with allow_subsecond")
	}
}

func TestDue(t *testing.T) {
	s, _ := schedule.ParseSpec("@every 1s", false)
	from := utc("2026-03-07T00:00:00Z")
	got, total, capped := s.Due(from, from.Add(10*time.Second+500*time.Millisecond), 3)
	if total != 10 || capped || len(got) != 3 || !got[2].Equal(from.Add(10*time.Second)) || !got[0].Equal(from.Add(8*time.Second)) {
		t.Errorf("@every 1s over 10.5 s: %v, total %d, capped %v", got, total, capped)
	}
	c, _ := schedule.ParseSpec("* * * * * *", false)
	got, total, _ = c.Due(from, from.Add(10*time.Second+500*time.Millisecond), 3)
	if total != 10 || len(got) != 3 || !got[2].Equal(from.Add(10*time.Second)) {
		t.Errorf("every second (cron) over 10.5 s: %v, total %d", got, total)
	}
	// More ticks than are walked one by one: the last ones still come.
	got, total, capped = c.Due(from, from.Add(48*time.Hour), 2)
	if !capped || total < 100_000 || len(got) != 2 || !got[1].Equal(from.Add(48*time.Hour)) || !got[0].Equal(from.Add(48*time.Hour-time.Second)) {
		t.Errorf("every second over two days: %v, total %d, capped %v", got, total, capped)
	}
}

func TestTickID(t *testing.T) {
	tick := utc("2026-11-24T02:00:00.250Z")
	id := schedule.TickIDForTest("nightly-2", tick)
	if id != "sched.nightly-2.20261124T020000.250Z" {
		t.Fatalf("tick id %q", id)
	}
	name, at, ok := schedule.TickOf(id)
	if !ok || name != "nightly-2" || !at.Equal(tick) {
		t.Fatalf("TickOf(%q) = %q, %s, %v", id, name, at, ok)
	}
	if _, _, ok := schedule.TickOf("sched.nightly.manual.20261124T020000.250Z.ab12cd"); ok {
		t.Error("a trigger's id read as a tick's")
	}
}
