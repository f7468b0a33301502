package metrics

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"testing"
)

// The label values the supervisor counts under are the ones the metrics'
// help texts list: read from its call sites, every literal value is
// listed, and every listed value is used.
func TestLabelValuesAreTheHelpTexts(t *testing.T) {
	files, err := filepath.Glob("../supervisor/*.go")
	if err != nil {
		t.Fatal(err)
	}
	var src []byte
	for _, f := range files {
		if m, _ := filepath.Match("*_test.go", filepath.Base(f)); m {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		src = append(src, b...)
	}
	for _, c := range []struct {
		metric string
		labels []Label
		site   *regexp.Regexp
	}{
		{"vigil_worker_restarts_total", RestartReasons, regexp.MustCompile(`Metrics\.Restart\([^,]+, "([a-z_]+)"\)`)},
		{"vigil_recovered_jobs_total", RecoveredReasons, regexp.MustCompile(`recover(?:Tasks|PID)\([^"]*"([a-z_]+)"`)},
		{"vigil_worker_crashes_total", CrashCauses, regexp.MustCompile(`(?m)killFor\([^"]*"([a-z_]+)"|cause :?= "([a-z_]+)"|s\.crashed\(.*, "([a-z_]+)"\)$`)},
	} {
		var listed, used []string
		for _, l := range c.labels {
			listed = append(listed, l.Value)
		}
		for _, m := range c.site.FindAllSubmatch(src, -1) {
			for _, g := range m[1:] {
				if v := string(g); v != "" && !slices.Contains(used, v) {
					used = append(used, v)
				}
			}
		}
		for _, v := range used {
			if !slices.Contains(listed, v) {
				t.Errorf("%s: the supervisor counts %q, which its help text does not list", c.metric, v)
			}
		}
		for _, v := range listed {
			if !slices.Contains(used, v) {
				t.Errorf("%s: its help text lists %q, which the supervisor never counts", c.metric, v)
			}
		}
	}
}
