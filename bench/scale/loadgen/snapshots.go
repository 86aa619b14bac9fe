package main

import (
	"io/fs"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"coord/storage/snapshot"
)

// snapshotWatch counts the snapshots the servers start during a phase
// (--data-dirs), so that a figure said to include a snapshot is seen to:
// it lists the snapshot files under each data directory every
// snapshotPollInterval, and counts the indexes that appear, written
// ("<index>-<term>.snap") or being written (the same name with ".tmp").
// A snapshot takes far longer than the interval to write at the sizes
// measured, so none is missed. It also keeps when each was first seen,
// from the start of the watch: whether a snapshot fell early or late in a
// phase moves the phase's rate (issue 21, `steady2`).
type snapshotWatch struct {
	stopCh chan struct{}
	done   chan [][]time.Duration
}

const snapshotPollInterval = 50 * time.Millisecond

func watchSnapshots(dirs []string) *snapshotWatch {
	w := &snapshotWatch{stopCh: make(chan struct{}), done: make(chan [][]time.Duration, 1)}
	before := make([]map[uint64]bool, len(dirs))
	seen := make([]map[uint64]time.Duration, len(dirs))
	for i, dir := range dirs {
		before[i], seen[i] = snapshotIndexes(dir), map[uint64]time.Duration{}
	}
	start := time.Now()
	go func() {
		tick := time.NewTicker(snapshotPollInterval)
		defer tick.Stop()
		for {
			for i, dir := range dirs {
				for index := range snapshotIndexes(dir) {
					if _, ok := seen[i][index]; !ok && !before[i][index] {
						seen[i][index] = time.Since(start)
					}
				}
			}
			select {
			case <-w.stopCh:
				started := make([][]time.Duration, len(dirs))
				for i := range seen {
					started[i] = slices.Sorted(maps.Values(seen[i]))
				}
				w.done <- started
				return
			case <-tick.C:
			}
		}
	}()
	return w
}

// stop ends the watch and returns, for each directory, when each snapshot
// started in it was first seen, from the start of the watch, earliest
// first.
func (w *snapshotWatch) stop() [][]time.Duration { close(w.stopCh); return <-w.done }

// snapshotIndexes returns the indexes of the snapshot files, finished or
// not, under dir (a server's data directory).
func snapshotIndexes(dir string) map[uint64]bool {
	found := map[uint64]bool{}
	_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil // a file removed while walking: the next poll sees the rest
		}
		name := strings.TrimSuffix(d.Name(), ".tmp")
		if index, _, ok := snapshot.ParseFileName(name); ok && !d.IsDir() {
			found[index] = true
		}
		return nil
	})
	return found
}
