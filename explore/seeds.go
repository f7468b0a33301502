package explore

import (
	"bufio"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
)

// Replay is one line of the replay list (explore/testdata/seeds.txt): a
// seed that failed once, the backend it failed on, and, while the defect
// it shows is not fixed, the name of that open defect (then its failure is
// expected and does not fail the run).
type Replay struct {
	Seed    uint64
	Backend string
	Known   string // "" = must pass
}

// ReadReplays reads a replay list: "<seed> <backend> [known <finding>…]"
// per line, # comments.
func ReadReplays(path string) ([]Replay, error) {
	f, err := os.Open(path)
	if err != nil {
		if os.IsNotExist(err) {
			return nil, nil
		}
		return nil, err
	}
	defer f.Close()
	var out []Replay
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line, _, _ := strings.Cut(sc.Text(), "#")
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		seed, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil || len(f) < 2 || !slices.Contains(Backends, f[1]) {
			return nil, fmt.Errorf("%s:%d: want \"<seed> %s [known <finding>]\"", path, n, strings.Join(Backends, "|"))
		}
		r := Replay{Seed: seed, Backend: f[1]}
		if len(f) > 2 {
			if f[2] != "known" || len(f) < 4 {
				return nil, fmt.Errorf("%s:%d: after the backend, only \"known <finding>\"", path, n)
			}
			r.Known = strings.Join(f[3:], " ")
		}
		out = append(out, r)
	}
	return out, sc.Err()
}

// AppendReplay adds a failing seed to the replay list.
func AppendReplay(path string, r Result) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	var inv []string
	for _, v := range r.Violations {
		inv = append(inv, strconv.Itoa(v.Invariant))
	}
	_, err = fmt.Fprintf(f, "%d %s # invariants %s: %s\n", r.Seed, r.Backend, strings.Join(inv, ","), firstLine(r.Violations[0].Evidence))
	return err
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > 140 {
		s = s[:140] + "…"
	}
	return s
}
