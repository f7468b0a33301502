package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"

	"gopkg.in/yaml.v3"
)

// Scheduler holds the cluster's rules for schedules.
type Scheduler struct {
	AllowSubsecond bool     `yaml:"allow_subsecond" doc:"Lets @every go below a second."`
	MisfireGrace   Duration `yaml:"misfire_grace" doc:"How late a tick may fire and still count as on time; a later one is missed, for its catch_up to decide."`
	MaxCatchUp     int      `yaml:"max_catch_up" doc:"The most missed ticks catch_up: all fires at once (the most recent; the older are skipped)."`
}

// Schedule is one periodic task (docs/periodic-tasks.md).
type Schedule struct {
	Name      string   `yaml:"name" doc:"The schedule's name, unique in the cluster (a-z, 0-9, _ and -)."`
	Spec      string   `yaml:"spec" doc:"When it fires: a cron line (5 fields, or 6 with seconds), optionally after CRON_TZ=<zone>, or @every <duration>, @hourly, @daily …"`
	Queue     string   `yaml:"queue" doc:"The queue of its tasks: a pool's."`
	Type      string   `yaml:"type" doc:"The task type of its tasks."`
	Payload   Payload  `yaml:"payload" doc:"Any YAML value, handed to the handler as its JSON; none: an empty payload."`
	MaxRetry  *int     `yaml:"max_retry" doc:"asynq's MaxRetry of each task; none: asynq's default (25)."`
	Timeout   Duration `yaml:"timeout" doc:"Each task's timeout; 0: the pool's task_timeout."`
	Retention Duration `yaml:"retention" doc:"How long asynq keeps each completed task; 0: not kept."`
	Unique    Duration `yaml:"unique" doc:"While a task of the schedule with the same type and payload is pending or running (for at most this long), a tick enqueues nothing; 0: off."`
	CatchUp   string   `yaml:"catch_up" default:"last" doc:"What the leader does with missed ticks: none skips them, last fires the latest once, all fires each (at most scheduler.max_catch_up)."`

	line  int            // of the entry
	lines map[string]int // of each field's value
}

// Payload is a YAML value kept as its JSON.
type Payload json.RawMessage

// UnmarshalYAML converts the value to JSON.
func (p *Payload) UnmarshalYAML(n *yaml.Node) error {
	var v any
	if err := n.Decode(&v); err != nil {
		return at(n, err)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return at(n, fmt.Errorf("payload has no JSON form (map keys must be strings): %w", err))
	}
	*p = b
	return nil
}

// scheduleFields are the YAML names of Schedule's fields.
var scheduleFields = func() map[string]bool {
	m := map[string]bool{}
	t := reflect.TypeFor[Schedule]()
	for i := range t.NumField() {
		if tag := strings.Split(t.Field(i).Tag.Get("yaml"), ",")[0]; tag != "" {
			m[tag] = true
		}
	}
	return m
}()

// UnmarshalYAML reads an entry and remembers where each field is, for
// errors found later (Validate). Unknown fields are errors.
func (s *Schedule) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.MappingNode {
		return at(n, errors.New("a schedule is a mapping (name, spec, queue, type, …)"))
	}
	s.line, s.lines = n.Line, map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := n.Content[i]
		if !scheduleFields[k.Value] {
			return &posError{line: k.Line, col: k.Column, err: fmt.Errorf("field %s not found in type config.Schedule", k.Value)}
		}
		s.lines[k.Value] = n.Content[i+1].Line
	}
	type plain Schedule
	p := plain(*s)
	if err := n.Decode(&p); err != nil {
		return err
	}
	*s = Schedule(p)
	return nil
}

// At names where field ("" = the entry) of schedule i is in the file, if
// known: " (line 12)", else "".
func (c Config) At(i int, field string) string {
	if i < 0 || i >= len(c.Schedules) {
		return ""
	}
	s := c.Schedules[i]
	if l, ok := s.lines[field]; ok {
		return fmt.Sprintf(" (line %d)", l)
	}
	if s.line > 0 {
		return fmt.Sprintf(" (line %d)", s.line)
	}
	return ""
}

// validateScheduler checks the scheduler section and that schedule names
// are unique; what a schedule's spec, queue and payload may be is the
// schedule package's to say (vigil.ValidateSettings asks it).
func (c Config) validateScheduler() error {
	switch {
	case c.Scheduler.MisfireGrace <= 0:
		return errors.New("scheduler.misfire_grace must be > 0")
	case c.Scheduler.MaxCatchUp < 1:
		return errors.New("scheduler.max_catch_up must be >= 1")
	}
	seen := map[string]int{}
	for i, s := range c.Schedules {
		if j, dup := seen[s.Name]; dup {
			return fmt.Errorf("schedules[%d].name: duplicate schedule %q (also schedules[%d])%s", i, s.Name, j, c.At(i, "name"))
		}
		seen[s.Name] = i
	}
	return nil
}
