package server

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Limits of a subscription (GET /api/v1/events).
const (
	// MaxPatterns is the most topic patterns one subscription may name.
	MaxPatterns = 64
	// MaxPatternLen bounds one pattern.
	MaxPatternLen = 256
	// MaxPatternSegments and MaxPatternStars bound one pattern's segments
	// and its "*" (topics have at most four segments): matching costs at
	// most C(segments, stars) steps.
	MaxPatternSegments = 8
	MaxPatternStars    = 4
)

// errPattern is wrapped by every refusal of a topic pattern.
var errPattern = errors.New("invalid topic pattern")

// pattern is one parsed topic pattern (docs/design.md §8): segments separated by
// ':', where "*" stands for one or more whole segments.
type pattern []string

// parsePattern checks a pattern: non-empty segments of printable ASCII, no
// more than MaxPatternLen bytes, and "*" only as a whole segment.
func parsePattern(s string) (pattern, error) {
	if s == "" || len(s) > MaxPatternLen {
		return nil, fmt.Errorf("%w %q: 1 to %d bytes", errPattern, truncate(s, 80), MaxPatternLen)
	}
	segs := strings.Split(s, ":")
	if len(segs) > MaxPatternSegments || strings.Count(s, "*") > MaxPatternStars {
		return nil, fmt.Errorf("%w %q: at most %d segments and %d *", errPattern, truncate(s, 80), MaxPatternSegments, MaxPatternStars)
	}
	for _, seg := range segs {
		if seg == "" {
			return nil, fmt.Errorf("%w %q: empty segment", errPattern, truncate(s, 80))
		}
		for i := 0; i < len(seg); i++ {
			if c := seg[i]; c <= ' ' || c >= 0x7f || (c == '*' && seg != "*") {
				return nil, fmt.Errorf("%w %q: segments are names or a whole *", errPattern, truncate(s, 80))
			}
		}
	}
	return pattern(segs), nil
}

// match reports whether topic matches p.
func (p pattern) match(topic string) bool {
	return matchSegs(p, strings.Split(topic, ":"))
}

// matchSegs matches segments; "*" takes one or more segments. Patterns are
// short (MaxPatternSegments, MaxPatternStars), so plain backtracking is
// fine; a pattern longer than the topic fails at once (each of its
// segments takes at least one).
func matchSegs(p, t []string) bool {
	if len(p) > len(t) {
		return false
	}
	for len(p) > 0 {
		if p[0] == "*" {
			rest := p[1:]
			// A trailing run of stars needs at least one segment each.
			for n := 1; n <= len(t); n++ {
				if matchSegs(rest, t[n:]) {
					return true
				}
			}
			return false
		}
		if len(t) == 0 || p[0] != t[0] {
			return false
		}
		p, t = p[1:], t[1:]
	}
	return len(t) == 0
}

// subscription is a parsed list of patterns.
type subscription struct {
	patterns []pattern
	// key identifies the pattern set: clients with equal keys share the
	// matching work of the broker.
	key string
}

// parseSubscription parses the topic parameters; none means every topic.
func parseSubscription(raw []string) (subscription, error) {
	if len(raw) == 0 {
		raw = []string{"*"}
	}
	if len(raw) > MaxPatterns {
		return subscription{}, fmt.Errorf("%w: at most %d patterns", errPattern, MaxPatterns)
	}
	set := slices.Clone(raw)
	slices.Sort(set)
	set = slices.Compact(set)
	sub := subscription{key: strings.Join(set, "\n")}
	for _, s := range set {
		p, err := parsePattern(s)
		if err != nil {
			return subscription{}, err
		}
		sub.patterns = append(sub.patterns, p)
	}
	return sub, nil
}

// match reports whether any pattern matches topic.
func (s subscription) match(topic string) bool {
	for _, p := range s.patterns {
		if p.match(topic) {
			return true
		}
	}
	return false
}

// wants reports whether some pattern could match a topic whose first
// segment is kind (so that a snapshot reads only what it needs).
func (s subscription) wants(kind string) bool {
	for _, p := range s.patterns {
		if p[0] == "*" || p[0] == kind {
			return true
		}
	}
	return false
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
