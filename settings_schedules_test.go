package vigil

import (
	"strings"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/schedule"
)

const schedulesYAML = `pools:
  - queue: reports
    command: [./bin/reporter]
scheduler:
  misfire_grace: 30s
schedules:
  - name: nightly
    spec: CRON_TZ=Europe/Paris 0 2 * * *
    queue: reports
    type: report:daily
    payload: {kind: daily, recipients: [ops, finance]}
    max_retry: 3
    timeout: 10m
    retention: 24h
    unique: 1h
    catch_up: all
  - name: tick
    spec: "@every 1s"
    queue: reports
    type: heartbeat
`

func TestSchedules(t *testing.T) {
	c, err := ParseSettings([]byte(schedulesYAML))
	if err == nil {
		err = ValidateSettings(c)
	}
	if err != nil {
		t.Fatal(err)
	}
	ds := scheduleDefinitions(c)
	if len(ds) != 2 {
		t.Fatalf("%d schedules", len(ds))
	}
	d := ds[0]
	if d.Name != "nightly" || d.Spec != "CRON_TZ=Europe/Paris 0 2 * * *" || d.Type != "report:daily" || d.CatchUp != schedule.CatchUpAll ||
		string(d.Payload) != `{"kind":"daily","recipients":["ops","finance"]}` || *d.MaxRetry != 3 || d.Timeout != 10*time.Minute ||
		d.Retention != 24*time.Hour || d.Unique != time.Hour || d.Source != schedule.SourceConfig {
		t.Errorf("nightly: %+v", d)
	}
	if ds[1].Payload != nil || ds[1].CatchUp != "" {
		t.Errorf("tick: %+v", ds[1])
	}
	if s := schedulerSettings(c); s.MisfireGrace != 30*time.Second || s.MaxCatchUp != schedule.MaxCatchUpDefault || s.AllowSubsecond {
		t.Errorf("settings %+v", s)
	}
}

// A bad schedule refuses the configuration with the field and its line.
func TestBadScheduleNamesFieldAndLine(t *testing.T) {
	tests := []struct {
		name, old, new, want string
	}{
		{"bad spec", "spec: \"@every 1s\"", "spec: 61 * * * *", "schedules[1].spec: invalid schedule: \"61 * * * *\": end of range (61) above maximum (59): 61 (line 18)"},
		{"bad zone", "CRON_TZ=Europe/Paris", "CRON_TZ=Europe/Atlantis", `schedules[0].spec: invalid schedule: "CRON_TZ=Europe/Atlantis 0 2 * * *": unknown time zone "Europe/Atlantis" (line 8)`},
		{"unknown queue", "    queue: reports\n    type: heartbeat", "    queue: nope\n    type: heartbeat", `schedules[1].queue: unknown queue "nope": no pool consumes it (line 19)`},
		{"too fast", "spec: \"@every 1s\"", "spec: \"@every 100ms\"", "schedules[1].spec: invalid schedule: \"@every 100ms\": @every 100ms fires faster than once a second (allowed with scheduler.allow_subsecond) (line 18)"},
		{"duplicate name", "name: tick", "name: nightly", `schedules[1].name: duplicate schedule "nightly" (also schedules[0]) (line 17)`},
		{"payload over the limit", "    type: heartbeat", "    type: heartbeat\n    payload: " + strings.Repeat("x", schedule.MaxPayloadDefault), "schedules[1].payload: invalid schedule: 1048578 bytes, over the limit of 1048576 (line 21)"},
		{"bad policy", "catch_up: all", "catch_up: most", `schedules[0].catch_up: invalid schedule: "most" must be none, last or all (line 16)`},
		{"unknown field", "max_retry: 3", "max_retries: 3", "line 12: field max_retries not found in type config.Schedule"},
		{"bad duration", "timeout: 10m", "timeout: ten", `schedules[0].timeout: invalid duration "ten"`},
		{"bad grace", "misfire_grace: 30s", "misfire_grace: 0s", "scheduler.misfire_grace must be > 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !strings.Contains(schedulesYAML, tt.old) {
				t.Fatalf("%q not in the document", tt.old)
			}
			c, err := ParseSettings([]byte(strings.Replace(schedulesYAML, tt.old, tt.new, 1)))
			if err == nil {
				err = ValidateSettings(c)
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v\nwant it to say %q", err, tt.want)
			}
		})
	}
	// The setting allows it.
	c, err := ParseSettings([]byte(strings.Replace(schedulesYAML, "misfire_grace: 30s", "misfire_grace: 30s\n  allow_subsecond: true", 1) + "  - {name: fast, spec: '@every 100ms', queue: reports, type: t}\n"))
	if err == nil {
		err = ValidateSettings(c)
	}
	if err != nil {
		t.Errorf("sub-second schedule with allow_subsecond: %v", err)
	}
}
