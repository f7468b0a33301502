package queue

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestAsynqScriptsPinned compares the copies of asynq's scripts that the
// worker's hook recognizes (asynqscripts.go, asynqkeys.go) with the source
// of the asynq release this module builds with, in the module cache: an
// asynq upgrade that changes one fails here, not in production (where the
// hook would no longer recognize the call and let it through untouched).
func TestAsynqScriptsPinned(t *testing.T) {
	out, err := exec.Command("go", "env", "GOMODCACHE").Output()
	if err != nil {
		t.Skipf("go env GOMODCACHE: %v", err)
	}
	path := filepath.Join(strings.TrimSpace(string(out)), "github.com", "hibiken", "asynq@"+AsynqVersion, "internal", "rdb", "rdb.go")
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("asynq %s's source: %v", AsynqVersion, err)
	}
	for name, copy := range map[string]string{
		"dequeueCmd":              asynqDequeueSource,
		"doneCmd":                 asynqDoneSource,
		"doneUniqueCmd":           asynqDoneUniqueSource,
		"markAsCompleteCmd":       asynqCompleteSource,
		"markAsCompleteUniqueCmd": asynqCompleteUniqueSource,
		"retryCmd":                asynqRetrySource,
		"archiveCmd":              asynqArchiveSource,
		"requeueCmd":              asynqRequeueSource,
		"listLeaseExpiredCmd":     asynqListLeaseExpiredSource,
	} {
		m := regexp.MustCompile("(?s)var " + name + " = redis\\.NewScript\\(`(.*?)`\\)").FindSubmatch(src)
		if m == nil {
			t.Errorf("asynq %s has no %s", AsynqVersion, name)
			continue
		}
		if string(m[1]) != copy {
			t.Errorf("asynq %s's %s differs from the copy the worker's hook knows", AsynqVersion, name)
		}
	}
	if len(outcomeScripts) != 7 {
		t.Errorf("%d outcome scripts known, want 7 (two share a SHA?)", len(outcomeScripts))
	}
}
