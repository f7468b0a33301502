package config

import (
	"flag"
	"os"
	"os/exec"
	"reflect"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "write docs/config-reference.md again")

const referencePath = "../docs/config-reference.md"

// docs/config-reference.md is Reference's output: a setting added,
// renamed or given another default changes the reference in the same
// commit (`make docs`).
func TestReferenceIsCurrent(t *testing.T) {
	want := Reference()
	if *update {
		if err := os.WriteFile(referencePath, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(referencePath)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Fatalf("%s is stale: run `make docs` (go test ./config -run TestReferenceIsCurrent -update)", referencePath)
	}
}

// Every field of the file has its doc tag: the reference and the flags'
// help are written from them.
func TestEverySettingIsDocumented(t *testing.T) {
	var walk func(prefix string, t0 reflect.Type)
	walk = func(prefix string, t0 reflect.Type) {
		for i := range t0.NumField() {
			f := t0.Field(i)
			tag := strings.Split(f.Tag.Get("yaml"), ",")[0]
			if tag == "" || !f.IsExported() {
				continue
			}
			if f.Tag.Get("doc") == "" {
				t.Errorf("%s%s has no doc tag", prefix, tag)
			}
			ft := f.Type
			if ft.Kind() == reflect.Slice {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				walk(prefix+tag+".", ft)
			}
		}
	}
	walk("", reflect.TypeFor[Config]())
	for _, want := range []string{"## pools[].backpressure", "| `backpressure.high_watermark` | `0` |", "| `heartbeat.ttl` | `30s` | `VIGIL_HEARTBEAT_TTL`, `--heartbeat.ttl` |"} {
		if !strings.Contains(Reference(), want) {
			t.Errorf("the reference has no %q", want)
		}
	}
}

// The configuration is a leaf of the import graph: the packages it
// configures import it nowhere and it imports none of them (the facade,
// package vigil, converts it into their Configs).
func TestConfigIsALeaf(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, p := range strings.Fields(string(out)) {
		for _, banned := range []string{"supervisor", "queue", "schedule", "server"} {
			if p == "github.com/vigil-dev/vigil/"+banned || strings.HasPrefix(p, "github.com/vigil-dev/vigil/"+banned+"/") {
				t.Errorf("config depends on %s", p)
			}
		}
	}
}
