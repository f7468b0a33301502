package ctl

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/vigil-dev/vigil/queue"
)

// scratch lists (and with --clean removes) the kept scratch directories
// under the scratch root, every queue's, oldest first: what the host's
// janitor would bound (scratch_max_age, scratch_max_bytes).
func scratch(o options, out io.Writer, now time.Time) error {
	if o.clean && o.olderThan <= 0 {
		return fmt.Errorf("%w: scratch --clean needs --older-than (e.g. 72h): a younger directory may belong to a task still running", ErrUsage)
	}
	root := o.dir
	if root == "" {
		root = queue.ScratchRootDefault()
	}
	entries, err := os.ReadDir(root)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	var queues []string
	for _, e := range entries {
		if e.IsDir() {
			queues = append(queues, e.Name())
		}
	}
	dirs, err := queue.ListScratch(map[string][]string{root: queues})
	if err != nil {
		return err
	}
	if o.olderThan > 0 {
		kept := dirs[:0]
		for _, d := range dirs {
			if now.Sub(d.Started) > o.olderThan {
				kept = append(kept, d)
			}
		}
		dirs = kept
	}
	var total int64
	removed := 0
	for _, d := range dirs {
		total += d.Bytes
		if o.clean {
			if err := os.RemoveAll(d.Path); err != nil {
				return fmt.Errorf("remove %s: %w", d.Path, err)
			}
			removed++
		}
	}
	if o.json {
		return json.NewEncoder(out).Encode(struct {
			Root    string                 `json:"root"`
			Dirs    []queue.ScratchDirInfo `json:"dirs"`
			Bytes   int64                  `json:"bytes"`
			Removed int                    `json:"removed"`
		}{root, dirs, total, removed})
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "QUEUE\tTASK\tSTARTED\tAGE\tBYTES\tFILES\tPATH")
	for _, d := range dirs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%s\n", d.Queue, d.Task, d.Started.UTC().Format(time.RFC3339),
			now.Sub(d.Started).Round(time.Second), d.Bytes, d.Files, filepath.Base(d.Path))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	verb := "kept"
	if o.clean {
		verb = "removed"
	}
	_, err = fmt.Fprintf(out, "%d directories %s under %s, %d bytes\n", len(dirs), verb, root, total)
	return err
}
