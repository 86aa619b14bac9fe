package report

import (
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// DefaultDirBase is where a run's files go when the caller names no
// directory: one directory per run under it, named for the time the run
// began.
const DefaultDirBase = "lab-out"

// DefaultDir returns the directory for a run that began at started:
// lab-out/20060102-150405.
func DefaultDir(started time.Time) string {
	return filepath.Join(DefaultDirBase, started.Format("20060102-150405"))
}

// PrepareDir creates dir if needed and checks that files can be written in
// it, so that a run of many minutes does not end unable to save its
// results. It leaves nothing behind but the directory.
func PrepareDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("report: create %s: %w", dir, err)
	}
	f, err := os.CreateTemp(dir, ".coord-lab-check-")
	if err != nil {
		return fmt.Errorf("report: %s is not writable: %w", dir, err)
	}
	name := f.Name()
	err = f.Close()
	if rerr := os.Remove(name); err == nil {
		err = rerr
	}
	if err != nil {
		return fmt.Errorf("report: %s: %w", dir, err)
	}
	return nil
}
