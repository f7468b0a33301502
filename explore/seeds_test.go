package explore

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

func TestReplayList(t *testing.T) {
	path := filepath.Join(t.TempDir(), "seeds.txt")
	text := "# comment\n\n12 miniredis\n34 redis-server known E1 and E3 # a note\n"
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := ReadReplays(path)
	want := []Replay{{Seed: 12, Backend: BackendMini}, {Seed: 34, Backend: BackendReal, Known: "E1 and E3"}}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("%v %v", got, err)
	}
	if err := AppendReplay(path, Result{Seed: 56, Backend: BackendMini, Violations: []Violation{{Invariant: 4, Evidence: "stuck\nmore"}}}); err != nil {
		t.Fatal(err)
	}
	got, err = ReadReplays(path)
	if err != nil || len(got) != 3 || got[2] != (Replay{Seed: 56, Backend: BackendMini}) {
		t.Fatalf("after append: %v %v", got, err)
	}
	for _, bad := range []string{"x miniredis\n", "1\n", "1 sqlite\n", "1 miniredis maybe\n", "1 miniredis known\n"} {
		if err := os.WriteFile(path, []byte(bad), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := ReadReplays(path); err == nil {
			t.Errorf("%q read without an error", bad)
		}
	}
	if got, err := ReadReplays(filepath.Join(t.TempDir(), "none")); err != nil || got != nil {
		t.Fatalf("a missing list: %v %v", got, err)
	}
}
