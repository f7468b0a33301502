package queue

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/vigil-dev/vigil/internal/clock"
	"github.com/vigil-dev/vigil/queue/internal/crashpoint"
)

// inTask returns a context of a task run by a worker whose outputs go to
// dir (the parts of a worker Publish uses).
func inTask(t *testing.T, dir, id string) context.Context {
	t.Helper()
	w := &worker{outputs: FSStore{Dir: dir}, clock: clock.Real{}, metrics: new(Metrics), scratchRoot: t.TempDir(), q: "q"}
	return context.WithValue(context.Background(), jobKey{}, &job{w: w, queue: "q", id: id})
}

func publishBytes(ctx context.Context, name string, b []byte) (Output, error) {
	return Publish(ctx, name, func(w io.Writer) error { _, err := w.Write(b); return err })
}

// A crash at every step of a commit, over an earlier output or none: the
// final key holds a whole output or nothing, never a part, and Lookup
// finds the old output or the new one, whole, and leaves no debris.
func TestCommitCrashAtEveryStep(t *testing.T) {
	t.Cleanup(func() { crashpoint.At = nil })
	old, new := bytes.Repeat([]byte("old "), 1000), bytes.Repeat([]byte("NEW!"), 3000)
	for _, hadOld := range []bool{false, true} {
		for step := 0; step <= 3; step++ {
			name := map[bool]string{false: "fresh", true: "over-old"}[hadOld] + "/step" + string(rune('0'+step))
			t.Run(name, func(t *testing.T) {
				dir := t.TempDir()
				ctx := inTask(t, dir, "task-1")
				if hadOld {
					if _, err := publishBytes(ctx, "out.bin", old); err != nil {
						t.Fatal(err)
					}
				}
				crashpoint.At = func(p string) bool { return p == "commit:"+strconv.Itoa(step) }
				defer func() { crashpoint.At = nil }()
				_, err := publishBytes(ctx, "out.bin", new)
				if step > 0 && !errors.Is(err, errCrashed) {
					t.Fatalf("publish: %v, want the simulated crash", err)
				}
				final := filepath.Join(FSStore{Dir: dir}.TaskDir("task-1"), "out.bin")
				// What a reader sees at the final key right after the crash.
				if b, err := os.ReadFile(final); err == nil && !bytes.Equal(b, old) && !bytes.Equal(b, new) {
					t.Fatalf("a partial file at the final key (%d bytes)", len(b))
				}
				crashpoint.At = nil
				out, ok, err := Published(ctx, "out.bin")
				if err != nil {
					t.Fatal(err)
				}
				want := map[bool][]byte{}
				switch {
				case step == 0: // no crash: the new one
					want[true] = new
				case step == 1 && hadOld: // before the file moved
					want[true] = old
				case step == 1:
					want[false] = nil
				default: // the file moved: the new one, completed
					want[true] = new
				}
				if _, exp := want[ok]; !exp {
					t.Fatalf("Published: ok=%v, want %v", ok, !ok)
				}
				if ok {
					b, _ := os.ReadFile(out.Path)
					if !bytes.Equal(b, want[true]) {
						t.Fatalf("Published found %d bytes, want %d", len(b), len(want[true]))
					}
				}
				entries, _ := os.ReadDir(filepath.Dir(final))
				for _, de := range entries {
					if n := de.Name(); strings.HasSuffix(n, pendingSuffix) || strings.HasPrefix(n, ".tmp-") || (!ok && n == "out.bin") {
						t.Errorf("left behind: %s", n)
					}
				}
			})
		}
	}
}

// An output that no longer matches its manifest is no output: removed,
// and the task runs again.
func TestCorruptOutputIsRemoved(t *testing.T) {
	dir := t.TempDir()
	ctx := inTask(t, dir, "t")
	out, err := publishBytes(ctx, "a.txt", []byte("hello world"))
	if err != nil {
		t.Fatal(err)
	}
	if got, ok, err := Published(ctx, "a.txt"); err != nil || !ok || got != out {
		t.Fatalf("Published: %+v %v %v", got, ok, err)
	}
	if err := os.WriteFile(out.Path, []byte("hello w0rld"), 0o644); err != nil { // same size
		t.Fatal(err)
	}
	if _, ok, err := Published(ctx, "a.txt"); err != nil || ok {
		t.Fatalf("a corrupt output found: ok=%v err=%v", ok, err)
	}
	if _, err := os.Stat(out.Path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the corrupt output is still there: %v", err)
	}
}

// Bad names, a failing write and a context that ends during the write
// publish nothing and keep an earlier output.
func TestPublishRefusals(t *testing.T) {
	dir := t.TempDir()
	ctx := inTask(t, dir, "t")
	for _, name := range []string{"", "a/b", `a\b`, "..", ".hidden", "x\x00y", strings.Repeat("n", MaxOutputName+1)} {
		if _, err := publishBytes(ctx, name, []byte("x")); !errors.Is(err, ErrOutputName) {
			t.Errorf("Publish(%q): %v, want ErrOutputName", name, err)
		}
	}
	if _, err := publishBytes(ctx, "keep", []byte("v1")); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("disk full")
	if _, err := Publish(ctx, "keep", func(w io.Writer) error { _, _ = w.Write([]byte("v2 part")); return boom }); !errors.Is(err, boom) {
		t.Errorf("failing write: %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	if _, err := Publish(cctx, "keep", func(w io.Writer) error { cancel(); _, err := w.Write([]byte("v3")); return err }); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled during the write: %v", err)
	}
	out, ok, err := Published(ctx, "keep")
	if b, _ := os.ReadFile(out.Path); err != nil || !ok || string(b) != "v1" {
		t.Errorf("the earlier output: ok=%v err=%v content %q", ok, err, b)
	}
	if _, err := Publish(context.Background(), "x", nil); !errors.Is(err, ErrNotInTask) {
		t.Errorf("outside a task: %v", err)
	}
}

// Two workers publishing one task's output at once (at-least-once
// delivery): the final key always holds one of the two whole, with its
// own manifest.
func TestConcurrentPublishers(t *testing.T) {
	dir := t.TempDir()
	a, b := bytes.Repeat([]byte("a"), 1<<16), bytes.Repeat([]byte("b"), 1<<17)
	var wg sync.WaitGroup
	for i := range 2 {
		ctx := inTask(t, dir, "same")
		content := [][]byte{a, b}[i]
		wg.Go(func() {
			for range 50 {
				if _, err := publishBytes(ctx, "out", content); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	out, ok, err := Published(inTask(t, dir, "same"), "out")
	if err != nil || !ok {
		t.Fatalf("Published: %v %v", ok, err)
	}
	got, _ := os.ReadFile(out.Path)
	if !bytes.Equal(got, a) && !bytes.Equal(got, b) {
		t.Fatalf("final output is neither whole: %d bytes", len(got))
	}
}

// Task ids name directories injectively, inside the store.
func TestOutputDirNames(t *testing.T) {
	seen := map[string]string{}
	for _, id := range []string{"a", "a_b", "a/b", "../x", ".x", "~61", "é", strings.Repeat("z", 300), strings.Repeat("z", 301)} {
		n := outputDirName(id)
		if strings.ContainsAny(n, "/\\") || n == ".." || n == "." || n == "" {
			t.Errorf("%q → %q escapes", id, n)
		}
		if other, dup := seen[n]; dup {
			t.Errorf("%q and %q → %q", id, other, n)
		}
		seen[n] = id
	}
}

// BenchmarkPublish100MB: publishing a 100 MB output (write into the
// scratch directory, SHA-256, fsync, rename, manifest, directory fsync)
// against a plain write of the same bytes to a file (create, write,
// close: no sync, no integrity), in the same run, the same directory.
func BenchmarkPublish100MB(b *testing.B) {
	const size = 100 << 20
	chunk := bytes.Repeat([]byte("0123456789abcdef"), 4096) // 64 KiB
	fill := func(w io.Writer) error {
		for n := 0; n < size; n += len(chunk) {
			if _, err := w.Write(chunk); err != nil {
				return err
			}
		}
		return nil
	}
	b.Run("plain", func(b *testing.B) {
		dir := b.TempDir()
		b.SetBytes(size)
		for i := range b.N {
			f, err := os.Create(filepath.Join(dir, "out-"+string(rune('a'+i%26))))
			if err != nil {
				b.Fatal(err)
			}
			if err := fill(f); err != nil {
				b.Fatal(err)
			}
			if err := f.Close(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("publish", func(b *testing.B) {
		dir := b.TempDir()
		w := &worker{outputs: FSStore{Dir: dir}, clock: clock.Real{}, metrics: new(Metrics), scratchRoot: b.TempDir(), q: "q"}
		b.SetBytes(size)
		for i := range b.N {
			ctx := context.WithValue(context.Background(), jobKey{}, &job{w: w, queue: "q", id: "t" + string(rune('a'+i%26))})
			if _, err := Publish(ctx, "out.bin", fill); err != nil {
				b.Fatal(err)
			}
		}
	})
}
