package vigil_test

import (
	"bufio"
	"fmt"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"

	"github.com/vigil-dev/vigil/health"
)

// docFiles are the repository's Markdown documents: the README, the
// reference documents and every guide under docs/.
func docFiles(t *testing.T) []string {
	t.Helper()
	files := []string{"README.md", "RELIABILITY.md", "BENCHMARKS.md"}
	err := filepath.WalkDir("docs", func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".md") {
			files = append(files, path)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

var (
	fenceRE      = regexp.MustCompile("^\\s*(```|~~~)")
	inlineCodeRE = regexp.MustCompile("`[^`]*`")
	linkRE       = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	headingRE    = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)
)

// markdown returns the lines of a Markdown file outside code fences,
// numbered from 1, as written (raw) and with inline code removed (prose).
func markdown(t *testing.T, path string) (lines []int, raw, prose map[int]string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	raw, prose = map[int]string{}, map[int]string{}
	in := false
	for i, l := range strings.Split(string(b), "\n") {
		if fenceRE.MatchString(l) {
			in = !in
			continue
		}
		if !in {
			lines = append(lines, i+1)
			raw[i+1], prose[i+1] = l, inlineCodeRE.ReplaceAllString(l, "")
		}
	}
	return lines, raw, prose
}

// prose returns the lines of a Markdown file outside code fences, with
// inline code removed, numbered from 1.
func prose(t *testing.T, path string) map[int]string {
	t.Helper()
	_, _, p := markdown(t, path)
	return p
}

// anchors are the heading anchors GitHub makes of a Markdown file: the
// heading's text (inline code's too) lowercased, punctuation dropped,
// spaces to hyphens, repeats numbered.
func anchors(t *testing.T, path string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	seen := map[string]int{}
	lines, raw, _ := markdown(t, path)
	for _, n := range lines {
		m := headingRE.FindStringSubmatch(raw[n])
		if m == nil {
			continue
		}
		var b strings.Builder
		for _, r := range strings.ToLower(m[1]) {
			switch {
			case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteByte('-')
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			out[fmt.Sprintf("%s-%d", a, n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}

// Every relative link of the documents resolves inside the repository, and
// a link to a heading names one that exists: a clone has everything its
// documents point at.
func TestDocLinksResolve(t *testing.T) {
	root, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, file := range docFiles(t) {
		for n, l := range prose(t, file) {
			for _, m := range linkRE.FindAllStringSubmatch(l, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				path, anchor, _ := strings.Cut(target, "#")
				abs := file
				if path != "" {
					abs = filepath.Join(filepath.Dir(file), path)
				}
				if full, _ := filepath.Abs(abs); !strings.HasPrefix(full, root+string(filepath.Separator)) && full != root {
					t.Errorf("%s:%d: %s points outside the repository", file, n, target)
					continue
				}
				info, err := os.Stat(abs)
				if err != nil {
					t.Errorf("%s:%d: %s: no such file", file, n, target)
					continue
				}
				if anchor != "" && !info.IsDir() && strings.HasSuffix(abs, ".md") && !anchors(t, abs)[anchor] {
					t.Errorf("%s:%d: %s: %s has no heading #%s", file, n, target, abs, anchor)
				}
			}
		}
	}
}

// The README and the guides are written for their readers: no issue,
// finding or explorer seed numbers and no commit hashes (those belong to
// docs/history/).
func TestDocsAreNotLogbooks(t *testing.T) {
	history := regexp.MustCompile(`\bissue [0-9]+|\bE[0-9]{1,3}\b|\bseed [0-9]{3,}`)
	hashLike := regexp.MustCompile(`\b[0-9a-f]{7,40}\b`)
	for _, file := range docFiles(t) {
		if strings.HasPrefix(file, filepath.Join("docs", "history")+string(filepath.Separator)) {
			continue
		}
		for n, l := range prose(t, file) {
			found := history.FindAllString(l, -1)
			for _, h := range hashLike.FindAllString(l, -1) {
				if strings.ContainsAny(h, "0123456789") && strings.ContainsAny(h, "abcdef") {
					found = append(found, h)
				}
			}
			for _, m := range found {
				t.Errorf("%s:%d: %q: history belongs to docs/history/", file, n, m)
			}
		}
	}
}

// historyRE finds what a comment in product code must not say: the rule a
// comment protects is stated in words with the test that holds it, not as
// an issue, finding, seed number or a dated remark.
var historyRE = regexp.MustCompile(`\bissue [0-9]+|\bE[0-9]{1,3}\b|\bseed [0-9]{3,}|\b20[0-9]{2}-[0-9]{2}-[0-9]{2}\b`)

// The comments of the non-test Go files state rules, not history.
func TestProductCommentsStateRules(t *testing.T) {
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case d.IsDir() && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) && path != ".":
			return filepath.SkipDir
		case d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") || strings.HasSuffix(path, ".gen.go"):
			return nil
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
		if err != nil {
			return err
		}
		for _, g := range f.Comments {
			for _, c := range g.List {
				if m := historyRE.FindString(c.Text); m != "" {
					t.Errorf("%s: %q: state the rule and name its test", fset.Position(c.Pos()), m)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// The README's embedding snippet is Example's body between embed:begin and
// embed:end, so that what a reader pastes compiles and runs.
func TestReadmeEmbeddingIsTheExample(t *testing.T) {
	src, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(src), "\t// embed:begin\n")
	body, _, ok2 := strings.Cut(rest, "\t// embed:end\n")
	if !ok || !ok2 {
		t.Fatal("example_test.go has no embed:begin … embed:end")
	}
	var snippet strings.Builder
	for l := range strings.Lines(body) {
		snippet.WriteString(strings.TrimPrefix(l, "\t"))
	}
	for _, doc := range []string{"README.md", filepath.Join("docs", "embedding.md")} {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), "```go\n"+snippet.String()) {
			t.Errorf("%s does not show Example's snippet as a Go block beginning:\n%s", doc, snippet.String())
		}
	}
}

// keyPlaceholders name the arguments of each key function of health.Keys
// as the spec's key table writes them.
var keyPlaceholders = map[string][]string{
	"Heartbeat": {"<c>"}, "Component": {"<c>"}, "Running": {"<c>"}, "Restarts": {"<c>"}, "Crashes": {"<c>"},
	"WorkerStats": {"<c>"}, "WorkerPause": {"<c>"}, "Slot": {"<c>"},
	"Free": {}, "Components": {}, "Control": {}, "Hosts": {}, "Leader": {}, "Events": {}, "Health": {}, "Schedules": {}, "Schema": {},
	"Host": {"<h>"}, "Commands": {"<h>"},
	"JobCrashes": {"<q>", "<t>"}, "JobSoloCrashes": {"<q>", "<t>"}, "JobProgress": {"<q>", "<t>"}, "JobStage": {"<q>", "<t>"}, "JobScratch": {"<q>", "<t>"},
	"Pause": {"<q>"}, "QueueStats": {"<q>"}, "DeadOwners": {"<q>"}, "Durable": {"<q>"},
	"Schedule": {"<q>", "<name>"}, "ScheduleTaken": {"<q>", "<name>"},
	"Reply": {"<id>"}, "Session": {"<nonce>"},
	"JobPrefix": nil, // the prefix of a task's keys, not a key
}

// The spec's key table (docs/design.md §3) lists exactly the keys that
// health.Keys builds.
func TestKeyTableMatchesKeys(t *testing.T) {
	keys := health.NewKeys(health.PrefixDefault)
	c := health.ComponentID{Queue: "qq", Slot: 7}
	v := reflect.ValueOf(keys)
	var built []string
	for i := range v.NumMethod() {
		m := v.Type().Method(i)
		names, ok := keyPlaceholders[m.Name]
		if !ok {
			t.Errorf("health.Keys.%s: a key the spec's table (docs/design.md §3) may not list: add it to the table and to keyPlaceholders", m.Name)
			continue
		}
		if names == nil || m.Type.NumOut() != 1 || m.Type.Out(0).Kind() != reflect.String {
			continue
		}
		var args []reflect.Value
		for j := 1; j < m.Type.NumIn(); j++ {
			switch m.Type.In(j) {
			case reflect.TypeFor[health.ComponentID]():
				args = append(args, reflect.ValueOf(c))
			case reflect.TypeFor[string]():
				args = append(args, reflect.ValueOf(names[len(args)]))
			default:
				t.Fatalf("health.Keys.%s takes a %s", m.Name, m.Type.In(j))
			}
		}
		built = append(built, strings.ReplaceAll(v.Method(i).Call(args)[0].String(), c.String(), "<c>"))
	}
	listed := designKeys(t)
	slices.Sort(built)
	for _, k := range built {
		if !slices.Contains(listed, k) {
			t.Errorf("docs/design.md §3 does not list %s", k)
		}
	}
	for _, k := range listed {
		if !slices.Contains(built, k) {
			t.Errorf("docs/design.md §3 lists %s, which health.Keys does not build", k)
		}
	}
}

// designKeys are the first column of docs/design.md §3's tables.
func designKeys(t *testing.T) []string {
	t.Helper()
	f, err := os.Open(filepath.Join("docs", "design.md"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	in := false
	row := regexp.MustCompile("^\\|\\s*`(vigil:[^`]+)`\\s*\\|")
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := sc.Text()
		if strings.HasPrefix(l, "## ") {
			in = strings.HasPrefix(l, "## 3.")
		}
		if m := row.FindStringSubmatch(l); in && m != nil {
			out = append(out, m[1])
		}
	}
	if len(out) == 0 {
		t.Fatal("docs/design.md §3 has no key table (rows beginning | `vigil:…` |)")
	}
	return out
}
