package queue

import (
	"io/fs"
	"os"
	"path/filepath"
)

// cleanScratch removes a task's scratch directory after a success (unless
// the pool keeps it) and keeps it after anything else, logging its size;
// it returns the size of a directory it kept.
func (w *worker) cleanScratch(j *job, dir string, ok bool) (kept bool, size int64) {
	if dir == "" {
		return false, 0
	}
	if ok && !w.env.KeepScratchOnSuccess {
		if err := os.RemoveAll(dir); err != nil {
			w.log.Warn("remove scratch dir", "task", j.id, "dir", dir, "err", err)
		}
		return false, 0
	}
	size, files := dirSize(dir)
	w.log.Info("scratch dir kept", "task", j.id, "dir", dir, "bytes", size, "files", files, "succeeded", ok)
	return true, size
}

// dirSize sums the sizes of the regular files under dir.
func dirSize(dir string) (bytes int64, files int) {
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		if info, err := d.Info(); err == nil {
			bytes += info.Size()
			files++
		}
		return nil
	})
	return bytes, files
}
