package config

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Duration is a time.Duration written in Go syntax ("500ms", "2s", "5m").
type Duration time.Duration

// UnmarshalYAML reads a Go duration string.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	return at(n, d.Set(n.Value))
}

// Set parses s.
func (d *Duration) Set(s string) error {
	v, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		return fmt.Errorf("invalid duration %q (want Go syntax such as 500ms, 2s, 5m)", s)
	}
	*d = Duration(v)
	return nil
}

// String formats d.
func (d Duration) String() string { return time.Duration(d).String() }

// Size is a byte count written as a number with an optional unit (B, KB,
// KiB, MB, MiB, GB, GiB).
type Size int64

// UnmarshalYAML reads a size.
func (s *Size) UnmarshalYAML(n *yaml.Node) error { return at(n, s.Set(n.Value)) }

// posError is a value error at a place in the document; Parse names the
// field found there.
type posError struct {
	line, col int
	err       error
}

func (e *posError) Error() string { return fmt.Sprintf("line %d: %v", e.line, e.err) }

func at(n *yaml.Node, err error) error {
	if err == nil {
		return nil
	}
	return &posError{line: n.Line, col: n.Column, err: err}
}

// walkValues calls visit with the field path ("heartbeat.ttl",
// "pools[0].task_timeout") of every value in the document, the document
// order.
func walkValues(n *yaml.Node, prefix string, visit func(path string, v *yaml.Node)) {
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			walkValues(c, prefix, visit)
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			p := n.Content[i].Value
			if prefix != "" {
				p = prefix + "." + p
			}
			visit(p, n.Content[i+1])
			walkValues(n.Content[i+1], p, visit)
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			p := fmt.Sprintf("%s[%d]", prefix, i)
			visit(p, c)
			walkValues(c, p, visit)
		}
	}
}

// paths maps the position of every value in the document to its field
// path.
func paths(n *yaml.Node, out map[[2]int]string) {
	walkValues(n, "", func(path string, v *yaml.Node) { out[[2]int{v.Line, v.Column}] = path })
}

var units = []struct {
	suffix string
	mult   int64
}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"KB", 1000}, {"MB", 1000_000}, {"GB", 1000_000_000}, {"B", 1}}

// Set parses v.
func (s *Size) Set(v string) error {
	t := strings.TrimSpace(v)
	mult := int64(1)
	for _, u := range units {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSpace(strings.TrimSuffix(t, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n < 0 {
		return fmt.Errorf("invalid size %q (want e.g. 1MiB, 512KiB, 1048576)", v)
	}
	*s = Size(n * mult)
	return nil
}

// List is a list of strings; in the environment and on the command line,
// comma-separated.
type List []string

// Set parses a comma-separated list.
func (l *List) Set(v string) error {
	*l = nil
	for f := range strings.SplitSeq(v, ",") {
		if f = strings.TrimSpace(f); f != "" {
			*l = append(*l, f)
		}
	}
	return nil
}

// String joins l with commas.
func (l List) String() string { return strings.Join(l, ",") }

// String formats s with the largest binary unit that divides it ("1MiB",
// "256KiB"), else in bytes.
func (s Size) String() string {
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if s != 0 && int64(s)%u.mult == 0 {
			return strconv.FormatInt(int64(s)/u.mult, 10) + u.suffix
		}
	}
	return strconv.FormatInt(int64(s), 10)
}
