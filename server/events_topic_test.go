package server

import (
	"errors"
	"strconv"
	"strings"
	"testing"
)

func TestPatternMatch(t *testing.T) {
	for _, tc := range []struct {
		pattern, topic string
		want           bool
	}{
		{"worker:*:status", "worker:tag:0:status", true},
		{"worker:*:status", "worker:tag:0:progress", false},
		{"worker:*:status", "worker:status", false}, // * is at least one segment
		{"worker:tag:*:status", "worker:tag:0:status", true},
		{"worker:tag:*:status", "worker:tag:12:status", true},
		{"worker:tag:*:status", "worker:library:0:status", false},
		{"worker:tag:0:status", "worker:tag:0:status", true},
		{"worker:tag:0:status", "worker:tag:1:status", false},
		{"queue:*:status", "queue:tag:status", true},
		{"queue:*:status", "queue:status", false},
		{"queue:status", "queue:status", true},
		{"queue:status", "queue:tag:status", false},
		{"queue:jobs", "queue:jobs", true},
		{"job:*", "job:tag:5b9c4a1e", true},
		{"job:tag:*", "job:tag:5b9c4a1e", true},
		{"job:tag:*", "job:library:5b9c4a1e", false},
		{"job:*", "queue:jobs", false},
		{"*", "system:health", true},
		{"*", "worker:tag:0:status", true},
		{"*:status", "queue:status", true},
		{"*:status", "worker:tag:0:status", true},
		{"*:status", "system:health", false},
		{"*:*", "system:health", true},
		{"*:*", "system", false},
		{"*:*:*:*", "worker:tag:0:status", true},
		{"*:*:*:*:status", "worker:tag:0:status", false},
		{"worker:*:*:status", "worker:tag:0:status", true},
		{"worker:*:0:*", "worker:tag:0:status", true},
		{"host:*:status", "host:box-1:status", true},
		{"system:health", "system:healthy", false},
		{"worker:ta", "worker:tag", false},
	} {
		p, err := parsePattern(tc.pattern)
		if err != nil {
			t.Fatalf("parse %q: %v", tc.pattern, err)
		}
		if got := p.match(tc.topic); got != tc.want {
			t.Errorf("%q matches %q: %v, want %v", tc.pattern, tc.topic, got, tc.want)
		}
	}
}

func TestPatternRefused(t *testing.T) {
	long := make([]byte, MaxPatternLen+1)
	for i := range long {
		long[i] = 'a'
	}
	for _, s := range []string{"", ":", "worker::status", "worker:ta*:status", "worker:*x", "a b", "worker:\n", "worker:\x7f", string(long), "worker:"} {
		if _, err := parsePattern(s); !errors.Is(err, errPattern) {
			t.Errorf("%q: %v, want errPattern", s, err)
		}
	}
}

func TestSubscription(t *testing.T) {
	all, err := parseSubscription(nil)
	if err != nil || !all.match("system:health") || !all.match("job:tag:x") {
		t.Fatalf("no topics must mean every topic: %v", err)
	}
	a, _ := parseSubscription([]string{"queue:*:status", "worker:*:status", "queue:*:status"})
	b, _ := parseSubscription([]string{"worker:*:status", "queue:*:status"})
	if a.key != b.key {
		t.Errorf("equal sets have keys %q and %q", a.key, b.key)
	}
	if !a.wants("worker") || !a.wants("queue") || a.wants("host") || a.wants("job") {
		t.Errorf("wants: %+v", a)
	}
	if !all.wants("host") {
		t.Error("* wants every kind")
	}
	many := make([]string, MaxPatterns+1)
	for i := range many {
		many[i] = "job:q:" + string(rune('a'+i%26)) + strconv.Itoa(i)
	}
	if _, err := parseSubscription(many); !errors.Is(err, errPattern) {
		t.Errorf("%d patterns: %v", len(many), err)
	}
}

func TestStreamID(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"1-0", "1-0", 0}, {"1-0", "1-1", -1}, {"2-0", "1-9", 1}, {"10-0", "9-0", 1}, {"0-0", "1790000000000-0", -1},
	} {
		a, okA := parseStreamID(tc.a)
		b, okB := parseStreamID(tc.b)
		if !okA || !okB {
			t.Fatalf("parse %q %q", tc.a, tc.b)
		}
		if got := a.cmp(b); got != tc.want {
			t.Errorf("cmp(%s, %s) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
		if a.String() != tc.a {
			t.Errorf("String %q", a.String())
		}
	}
	for _, s := range []string{"", "1", "1-", "-1", "a-1", "1-b", "1-2-3", "99999999999999999999999-0"} {
		if _, ok := parseStreamID(s); ok {
			t.Errorf("%q parsed", s)
		}
	}
}

// TestPatternCostIsBounded: a pattern has at most MaxPatternSegments
// segments and MaxPatternStars stars (issue 18, row 6: 64 patterns of 128
// stars cost 18-31 µs per event and connection, under the broker's lock).
func TestPatternCostIsBounded(t *testing.T) {
	for _, s := range []string{
		"a:b:c:d:e:f:g:h:i",             // 9 segments
		"*:*:*:*:*",                     // 5 stars
		"*:a:*:b:*:c:*:d:*",             // 5 stars, 9 segments
		strings.Repeat("*:", 127) + "*", // 128 stars
	} {
		if _, err := parsePattern(s); !errors.Is(err, errPattern) {
			t.Errorf("%.40q accepted", s)
		}
	}
	for _, s := range []string{"a:b:c:d:e:f:g:h", "*:*:*:*", "worker:*:*:status"} {
		if _, err := parsePattern(s); err != nil {
			t.Errorf("%q refused: %v", s, err)
		}
	}
}
