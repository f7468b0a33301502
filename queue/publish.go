package queue

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/vigil-dev/vigil/queue/internal/crashpoint"
)

// Outputs (docs/workers.md "Outputs and retries"). Delivery is at least once: a
// task may run again after its worker died, even after it finished its
// work. A handler that publishes its outputs through Publish gets, for each
// one, a final key that is a pure function of the task id and the name,
// never a partial file there, and on a later run Published tells whether a
// complete earlier output exists; a task type whose outputs are declared
// (WorkerConfig.Outputs) is marked done without running when all of them
// do.

// MaxOutputName bounds an output's name (bytes).
const MaxOutputName = 128

// ErrOutputName is wrapped by the errors of a name that is no output name.
var ErrOutputName = errors.New("invalid output name")

// Output is one published output.
type Output struct {
	Name   string `json:"name"`
	Path   string `json:"path"` // where the store keeps it (the file, for FSStore)
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"` // hex
}

// Manifest is what a store keeps beside an output, written after it: an
// output without a manifest, or whose size or SHA-256 differ from its
// manifest's, is not one.
type Manifest struct {
	Name        string    `json:"name"`
	Size        int64     `json:"size"`
	SHA256      string    `json:"sha256"`
	Task        string    `json:"task_id"`
	Queue       string    `json:"queue"`
	PublishedAt time.Time `json:"published_at"`
	PID         int       `json:"pid"`
}

// OutputStore keeps tasks' outputs. FSStore is the one shipped; an object
// store can implement it too.
type OutputStore interface {
	// Commit makes the complete local file src (synced; the store may
	// move it) the output name of task, described by m, atomically: a
	// reader sees the previous output or this one, never a part of one.
	Commit(ctx context.Context, task, name, src string, m Manifest) (Output, error)
	// Lookup returns output name of task if a complete one, matching its
	// manifest, exists. An output that does not match its manifest (a
	// crash between the two, a corruption) is removed and reported absent.
	Lookup(ctx context.Context, task, name string) (Output, bool, error)
}

// CheckOutputName reports whether name may name an output: 1 to
// MaxOutputName bytes of UTF-8, no path separator, no NUL, not starting
// with a dot (the store's own files do).
func CheckOutputName(name string) error {
	switch {
	case name == "" || len(name) > MaxOutputName:
		return fmt.Errorf("%w %q: 1 to %d bytes", ErrOutputName, name, MaxOutputName)
	case !utf8.ValidString(name) || strings.ContainsAny(name, "/\\\x00"):
		return fmt.Errorf("%w %q: no path separator or NUL", ErrOutputName, name)
	case name[0] == '.':
		return fmt.Errorf("%w %q: must not start with a dot", ErrOutputName, name)
	}
	return nil
}

// Publish writes the running task's output name: write fills it, into the
// task's scratch directory; the file is synced, measured (size, SHA-256)
// and committed to the worker's output store under a key made of the task
// id and name, its manifest last. A write that fails, or whose context
// ended meanwhile, publishes nothing (an earlier output of the same name
// stays). It returns ErrNotInTask outside a task run by RunWorker.
func Publish(ctx context.Context, name string, write func(w io.Writer) error) (Output, error) {
	j := jobFrom(ctx)
	if j == nil {
		return Output{}, ErrNotInTask
	}
	if err := CheckOutputName(name); err != nil {
		return Output{}, err
	}
	dir, err := ScratchDir(ctx)
	if err != nil {
		return Output{}, err
	}
	f, err := os.CreateTemp(dir, "publish-*")
	if err != nil {
		return Output{}, fmt.Errorf("publish %s: %w", name, err)
	}
	tmp := f.Name()
	fail := func(err error) (Output, error) {
		_ = f.Close()
		_ = os.Remove(tmp)
		return Output{}, fmt.Errorf("publish %s: %w", name, err)
	}
	h := sha256.New()
	bw := bufio.NewWriterSize(io.MultiWriter(f, h), 256<<10)
	cw := &countingWriter{w: bw}
	if err := write(cw); err != nil {
		return fail(err)
	}
	if err := bw.Flush(); err != nil {
		return fail(err)
	}
	if err := ctx.Err(); err != nil {
		return fail(fmt.Errorf("the task's context ended during the write: %w", err))
	}
	if err := f.Sync(); err != nil {
		return fail(err)
	}
	if err := f.Close(); err != nil {
		_ = os.Remove(tmp)
		return Output{}, fmt.Errorf("publish %s: %w", name, err)
	}
	m := Manifest{Name: name, Size: cw.n, SHA256: hex.EncodeToString(h.Sum(nil)), Task: j.id, Queue: j.queue,
		PublishedAt: j.w.clock.Now().UTC(), PID: j.w.pid}
	out, err := j.w.outputs.Commit(ctx, j.id, name, tmp, m)
	if err != nil {
		_ = os.Remove(tmp)
		return Output{}, fmt.Errorf("publish %s: %w", name, err)
	}
	j.w.metrics.OutputsPublished.Add(1)
	return out, nil
}

// Published returns the running task's output name if a complete one was
// published, by this run or an earlier one (see OutputStore.Lookup).
func Published(ctx context.Context, name string) (Output, bool, error) {
	j := jobFrom(ctx)
	if j == nil {
		return Output{}, false, ErrNotInTask
	}
	if err := CheckOutputName(name); err != nil {
		return Output{}, false, err
	}
	return j.w.outputs.Lookup(ctx, j.id, name)
}

// allPublished reports whether every output the task type declares exists.
func (w *worker) allPublished(ctx context.Context, id string, names []string) bool {
	for _, n := range names {
		if _, ok, err := w.outputs.Lookup(ctx, id, n); err != nil || !ok {
			if err != nil {
				w.log.Warn("look up a declared output: the task runs", "task", id, "output", n, "err", err)
			}
			return false
		}
	}
	return len(names) > 0
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// FSStore keeps outputs in a directory: output name of task t is the file
// <Dir>/<t>/<name> (t as is when it is a plain file name, else "~" and its
// hex), its manifest <Dir>/<t>/.<name>.manifest. Commit writes the new
// manifest beside the old one (pending), renames the file into place (a
// copy, synced, then a rename, across file systems), renames the pending
// manifest over the old one and syncs the directory, under an exclusive flock of
// <Dir>/<t>/.lock: two workers publishing one task's output at once end
// with one of the two whole, with its own manifest. On a shared file
// system the rename is atomic where the file system's is (NFS: per
// server); flock is advisory and, on NFS, depends on the client.
type FSStore struct {
	Dir string
}

// TaskDir is where the outputs of task go (a pure function of the id).
func (s FSStore) TaskDir(task string) string { return filepath.Join(s.Dir, outputDirName(task)) }

// outputDirName is an injective file name for a task id.
func outputDirName(task string) string {
	plain := task != "" && len(task) <= 200 && task[0] != '.' && task[0] != '~'
	for i := 0; plain && i < len(task); i++ {
		c := task[i]
		plain = c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.'
	}
	if plain {
		return task
	}
	if len(task) <= 100 {
		return "~" + hex.EncodeToString([]byte(task))
	}
	sum := sha256.Sum256([]byte(task))
	return "~~" + hex.EncodeToString(sum[:])
}

func manifestPath(dir, name string) string { return filepath.Join(dir, "."+name+".manifest") }

// errCrashed is what Commit returns when a test stops it dead at a step
// (crashpoint "commit:1": the pending manifest written, "commit:2": the
// file moved, "commit:3": the manifest moved), the files left as a SIGKILL
// there would leave them.
var errCrashed = errors.New("crashed (test)")

// pendingSuffix marks a manifest written before its file moved into place.
const pendingSuffix = ".pending"

// lock takes an exclusive flock of the task's directory, created if need
// be; unlock releases it.
func (s FSStore) lock(dir string) (unlock func(), err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		_ = f.Close()
	}, nil
}

// Commit implements OutputStore.
func (s FSStore) Commit(_ context.Context, task, name, src string, m Manifest) (Output, error) {
	if err := CheckOutputName(name); err != nil {
		return Output{}, err
	}
	dir := s.TaskDir(task)
	unlock, err := s.lock(dir)
	if err != nil {
		return Output{}, err
	}
	defer unlock()
	final, mpath := filepath.Join(dir, name), manifestPath(dir, name)
	blob, err := json.Marshal(m)
	if err != nil {
		return Output{}, err
	}
	// The new manifest waits beside the old one while the file moves: a
	// crash in between leaves the old output whole, or the new file with
	// its pending manifest, which Lookup completes.
	if err := writeSynced(dir, mpath+pendingSuffix, blob); err != nil {
		return Output{}, err
	}
	if crashpoint.Hit("commit:1") {
		return Output{}, errCrashed
	}
	if err := os.Rename(src, final); err != nil {
		if !errors.Is(err, syscall.EXDEV) {
			return Output{}, err
		}
		// Another file system: a synced copy beside the final key first.
		if err := copySynced(src, dir, final); err != nil {
			return Output{}, err
		}
		_ = os.Remove(src)
	}
	if crashpoint.Hit("commit:2") {
		return Output{}, errCrashed
	}
	if err := os.Rename(mpath+pendingSuffix, mpath); err != nil {
		return Output{}, err
	}
	if crashpoint.Hit("commit:3") {
		return Output{}, errCrashed
	}
	if err := syncDir(dir); err != nil {
		return Output{}, err
	}
	return Output{Name: name, Path: final, Size: m.Size, SHA256: m.SHA256}, nil
}

// Lookup implements OutputStore.
func (s FSStore) Lookup(ctx context.Context, task, name string) (Output, bool, error) {
	if err := CheckOutputName(name); err != nil {
		return Output{}, false, err
	}
	dir := s.TaskDir(task)
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return Output{}, false, nil
	}
	unlock, err := s.lock(dir)
	if err != nil {
		return Output{}, false, err
	}
	defer unlock()
	final, mpath := filepath.Join(dir, name), manifestPath(dir, name)
	size, sum, err := hashFile(ctx, final)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return Output{}, false, err
	}
	exists := err == nil
	matches := func(path string) (Manifest, bool) {
		blob, err := os.ReadFile(path)
		var m Manifest
		ok := err == nil && json.Unmarshal(blob, &m) == nil && m.Name == name && exists && m.Size == size && m.SHA256 == sum
		return m, ok
	}
	m, ok := matches(mpath)
	if !ok {
		// A commit cut short after its file moved: its pending manifest
		// describes the file; complete it.
		if m, ok = matches(mpath + pendingSuffix); ok {
			if err := os.Rename(mpath+pendingSuffix, mpath); err != nil {
				return Output{}, false, err
			}
		}
	}
	if ok {
		// A commit cut short before its file moved leaves a pending
		// manifest of nothing.
		if err := os.Remove(mpath + pendingSuffix); err != nil && !errors.Is(err, os.ErrNotExist) {
			return Output{}, false, err
		}
		return Output{Name: name, Path: final, Size: m.Size, SHA256: m.SHA256}, true, syncDir(dir)
	}
	// No manifest matches the file (or no file): not an output. Remove
	// what is left so that the task's next run starts clean.
	for _, p := range []string{final, mpath, mpath + pendingSuffix} {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return Output{}, false, err
		}
	}
	return Output{}, false, syncDir(dir)
}

// hashFile reads path whole: its size and hex SHA-256.
func hashFile(ctx context.Context, path string) (int64, string, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, "", err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, ctxReader{ctx: ctx, r: f})
	if err != nil {
		return 0, "", err
	}
	return n, hex.EncodeToString(h.Sum(nil)), nil
}

// ctxReader stops a long read when ctx ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// writeSynced writes data to path through a synced temporary file in dir
// and a rename.
func writeSynced(dir, path string, data []byte) error {
	return replaceSynced(dir, path, func(f *os.File) error { _, err := f.Write(data); return err })
}

// copySynced copies src to path through a synced temporary file in dir and
// a rename.
func copySynced(src, dir, path string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	return replaceSynced(dir, path, func(f *os.File) error { _, err := io.Copy(f, in); return err })
}

// replaceSynced fills a temporary file in dir, syncs it and renames it to
// path: path holds the old content or the new, whole.
func replaceSynced(dir, path string, fill func(*os.File) error) error {
	f, err := os.CreateTemp(dir, ".tmp-*")
	if err != nil {
		return err
	}
	err = fill(f)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		_ = os.Remove(f.Name())
	}
	return err
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
