package explore

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Build builds the host and worker binaries into dir, the host under the
// race detector when race is set (data races in the supervisor then fail
// the seed).
func Build(dir string, race bool) (hostBin, workerBin string, err error) {
	root, err := moduleRoot()
	if err != nil {
		return "", "", err
	}
	hostBin, workerBin = filepath.Join(dir, "vigilhost"), filepath.Join(dir, "chaosworker")
	// Without the race detector the binaries are built without cgo:
	// static, they start without the dynamic loader, and the hundreds of
	// processes a seed starts and ends share no library mappings (whose
	// locks a busy machine contends on).
	type build struct {
		args []string
		cgo  bool
	}
	builds := []build{
		{args: []string{"build", "-o", workerBin, "./chaos/internal/chaosworker"}},
		{args: []string{"build", "-o", hostBin, "./explore/internal/vigilhost"}},
	}
	if race {
		builds[1] = build{args: []string{"build", "-race", "-o", hostBin, "./explore/internal/vigilhost"}, cgo: true}
	}
	for _, b := range builds {
		cmd := exec.Command("go", b.args...)
		if !b.cgo {
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		}
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", "", fmt.Errorf("go %s: %v\n%s", strings.Join(b.args, " "), err, out)
		}
	}
	return hostBin, workerBin, nil
}

func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", fmt.Errorf("not inside the vigil module")
	}
	return filepath.Dir(mod), nil
}

// Subreaper makes this process the one its descendants' orphans come to,
// so that the explorer sees a worker outlive its supervisor.
func Subreaper() error { return becomeSubreaper() }
