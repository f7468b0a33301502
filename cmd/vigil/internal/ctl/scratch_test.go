package ctl_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// vigil ctl scratch lists this host's kept scratch directories without a
// server, and --clean --older-than removes only the old ones; --clean
// alone is refused.
func TestScratch(t *testing.T) {
	root := t.TempDir()
	mk := func(q, id string, age time.Duration) string {
		dir := filepath.Join(root, q, id+"-"+strconv.FormatInt(time.Now().Add(-age).UnixMilli(), 10))
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "f"), make([]byte, 10), 0o600); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	old := mk("tag", "t-old", 100*time.Hour)
	fresh := mk("other", "t-new", time.Minute)
	env := map[string]string{"VIGIL_SERVER": "http://127.0.0.1:1"} // never called
	code, out, errOut := runCtl(t, env, "scratch", "--dir", root)
	if code != 0 || !strings.Contains(out, "t-old") || !strings.Contains(out, "t-new") || !strings.Contains(out, "2 directories kept") {
		t.Fatalf("list: code %d\n%s%s", code, out, errOut)
	}
	if code, _, errOut := runCtl(t, env, "scratch", "--dir", root, "--clean"); code != 2 || !strings.Contains(errOut, "--older-than") {
		t.Errorf("--clean alone: code %d %s", code, errOut)
	}
	code, out, errOut = runCtl(t, env, "scratch", "--dir", root, "--clean", "--older-than", "72h")
	if code != 0 || !strings.Contains(out, "1 directories removed") {
		t.Fatalf("clean: code %d\n%s%s", code, out, errOut)
	}
	if _, err := os.Stat(old); !os.IsNotExist(err) {
		t.Errorf("old dir kept: %v", err)
	}
	if _, err := os.Stat(fresh); err != nil {
		t.Errorf("fresh dir removed: %v", err)
	}
}
