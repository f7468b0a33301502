package explore

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// The binaries the end-to-end tests run, built once (without the race
// detector: the test binary itself runs under it).
var shared *Shared

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "vigil-explore-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if err := Subreaper(); err != nil {
		fmt.Fprintln(os.Stderr, "subreaper:", err)
		os.Exit(2)
	}
	host, worker, err := Build(dir, false)
	if err != nil {
		os.RemoveAll(dir)
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if shared, err = NewShared(host, worker); err != nil {
		os.RemoveAll(dir)
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	code := m.Run()
	shared.Close() // before the leak check: the ledger's Redis is the tests'
	os.RemoveAll(dir)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}
