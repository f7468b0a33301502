package schedule

import (
	"errors"
	"fmt"
	"strings"
	"time"
	_ "time/tzdata" // every host computes the same ticks, whatever zone data its system has

	"github.com/robfig/cron/v3"
)

// Limits of a spec.
const (
	// MaxSpecLen bounds a spec's text.
	MaxSpecLen = 200
	// MinSubsecond is the shortest @every interval even with
	// Settings.AllowSubsecond.
	MinSubsecond = 10 * time.Millisecond
)

// ErrTooFast refuses a schedule that fires more often than once a second
// without Settings.AllowSubsecond.
var ErrTooFast = errors.New("fires faster than once a second")

// parser reads robfig/cron's syntax: five fields (minute resolution), six
// with a leading seconds field, or a descriptor (@hourly, @daily, …).
var parser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// Spec is a parsed schedule spec: the instants at which it ticks.
//
// A cron spec ticks at the instants robfig/cron v3's Schedule.Next gives,
// in the zone of its CRON_TZ= (or TZ=) prefix, UTC without one (never the
// host's local zone: hosts may differ). "@every <duration>" ticks at the
// multiples of the duration since the Unix epoch, so that every host, and
// every leader after a failover, computes the same ticks whenever it asks.
type Spec struct {
	text  string
	cron  cron.Schedule // nil for @every
	every time.Duration
	loc   *time.Location
}

// ParseSpec parses text. allowSubsecond lets "@every" go below a second
// (down to MinSubsecond); a cron spec ticks at most once a second.
func ParseSpec(text string, allowSubsecond bool) (Spec, error) {
	s := Spec{text: text, loc: time.UTC}
	rest := strings.TrimSpace(text)
	switch {
	case rest == "":
		return Spec{}, errors.New("empty spec")
	case len(text) > MaxSpecLen:
		return Spec{}, fmt.Errorf("longer than %d bytes", MaxSpecLen)
	}
	for _, p := range []string{"CRON_TZ=", "TZ="} {
		if !strings.HasPrefix(rest, p) {
			continue
		}
		zone, after, _ := strings.Cut(rest[len(p):], " ")
		if zone == "" || zone == "Local" {
			return Spec{}, fmt.Errorf("time zone %q: name an IANA zone (e.g. Europe/Paris) or UTC", zone)
		}
		loc, err := time.LoadLocation(zone)
		if err != nil {
			return Spec{}, fmt.Errorf("unknown time zone %q", zone)
		}
		s.loc, rest = loc, strings.TrimSpace(after)
		break
	}
	if d, ok := strings.CutPrefix(rest, "@every "); ok {
		every, err := time.ParseDuration(strings.TrimSpace(d))
		switch {
		case err != nil:
			return Spec{}, fmt.Errorf("@every: invalid duration %q (want Go syntax such as 30s, 5m, 1h)", strings.TrimSpace(d))
		case every < time.Second && !allowSubsecond:
			return Spec{}, fmt.Errorf("@every %s %w (allowed with scheduler.allow_subsecond)", every, ErrTooFast)
		case every < MinSubsecond:
			return Spec{}, fmt.Errorf("@every %s: shorter than %s", every, MinSubsecond)
		case every%time.Millisecond != 0:
			return Spec{}, fmt.Errorf("@every %s: not a whole number of milliseconds", every)
		}
		s.every = every
		return s, nil
	}
	if rest == "" {
		return Spec{}, errors.New("a time zone and no schedule")
	}
	c, err := parser.Parse(rest)
	if err != nil {
		return Spec{}, err
	}
	sc, ok := c.(*cron.SpecSchedule)
	if !ok {
		return Spec{}, fmt.Errorf("unsupported spec %q", rest)
	}
	sc.Location = s.loc
	s.cron = sc
	return s, nil
}

// String is the spec as written.
func (s Spec) String() string { return s.text }

// Location is the zone the spec ticks in.
func (s Spec) Location() *time.Location { return s.loc }

// Next is the first tick strictly after t (the zero time when there is
// none within robfig/cron's five-year horizon).
func (s Spec) Next(t time.Time) time.Time {
	if s.every > 0 {
		d := s.every.Milliseconds()
		ms := t.UnixMilli()
		n := ms/d + 1
		if ms < 0 && ms%d != 0 {
			n--
		}
		return time.UnixMilli(n * d).In(s.loc)
	}
	if s.cron == nil {
		return time.Time{}
	}
	return s.cron.Next(t.In(s.loc))
}

// Every is the interval of an "@every" spec, 0 for a cron spec.
func (s Spec) Every() time.Duration { return s.every }

// maxScan bounds how many ticks Due walks one by one.
const maxScan = 100_000

// Due returns the ticks in (from, now]: the last keep of them in order
// (keep ≥ 1), and how many there are in all. total is a lower bound when
// capped (more than maxScan ticks of a cron spec).
func (s Spec) Due(from, now time.Time, keep int) (ticks []time.Time, total int, capped bool) {
	keep = max(keep, 1)
	if !now.After(from) {
		return nil, 0, false
	}
	if s.every > 0 {
		first := s.Next(from)
		if first.After(now) {
			return nil, 0, false
		}
		d := s.every.Milliseconds()
		n := int((now.UnixMilli()-first.UnixMilli())/d) + 1
		from := max(0, n-keep)
		for i := from; i < n; i++ {
			ticks = append(ticks, time.UnixMilli(first.UnixMilli()+int64(i)*d).In(s.loc))
		}
		return ticks, n, false
	}
	ring := make([]time.Time, keep) // the last keep ticks, tick i at i%keep
	t := from
	for total < maxScan {
		t = s.Next(t)
		if t.IsZero() || t.After(now) {
			for i := max(0, total-keep); i < total; i++ {
				ticks = append(ticks, ring[i%keep])
			}
			return ticks, total, false
		}
		ring[total%keep] = t
		total++
	}
	// Too many to walk: find the last keep ticks by looking back from now
	// over wider and wider windows.
	for w := time.Minute; ; w *= 4 {
		start := now.Add(-w)
		var last []time.Time
		for t := s.Next(start); !t.IsZero() && !t.After(now); t = s.Next(t) {
			last = append(last, t)
			if len(last) > keep {
				last = last[1:]
			}
		}
		if len(last) >= keep || !start.After(from) || w > 20*366*24*time.Hour {
			return last, max(total, len(last)), true
		}
	}
}
