package wal

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"

	"coord/raft"
	"coord/storage/vfs"
)

// Preallocated segments: space allocated ahead of the writes reads as
// zeros, and recovery must tell that zero tail (the end of the log) from a
// torn batch before it (a torn tail) and from zeros where records belong
// (corruption).

var preallocQuiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// preallocOptions allocates in 1 KiB steps within 4 KiB segments.
func preallocOptions(logger *slog.Logger) Options {
	return Options{SegmentBytes: 4096, PreallocateBytes: 1024, Logger: logger, Background: func(work func()) { work() }}
}

func mustDo(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func segmentFile(t *testing.T, fsys vfs.FS, seq uint64) []byte {
	t.Helper()
	data, err := vfs.ReadFile(fsys, "/wal/"+segmentName(seq))
	mustDo(t, err)
	return data
}

// overwrite writes data at off in segment seq, as a crash that persisted
// some writes and not others would leave it.
func overwrite(t *testing.T, fsys vfs.FS, seq uint64, off int64, data []byte) {
	t.Helper()
	f, err := fsys.OpenWriteAt("/wal/" + segmentName(seq))
	mustDo(t, err)
	_, err = f.WriteAt(data, off)
	mustDo(t, err)
	mustDo(t, f.Sync())
	mustDo(t, f.Close())
}

func entriesEqual(a, b []raft.Entry) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Index != b[i].Index || a[i].Term != b[i].Term || !bytes.Equal(a[i].Data, b[i].Data) {
			return false
		}
	}
	return true
}

// A segment is allocated ahead of its records, and reopening it continues
// at the end of the records, not at the end of the file: the allocated
// length stays, and every batch comes back.
func TestPreallocatedSegmentReopenAndAppend(t *testing.T) {
	fsys := vfs.NewMemFS()
	w, _, err := Open(fsys, "/wal", preallocOptions(preallocQuiet))
	mustDo(t, err)
	if got := len(segmentFile(t, fsys, 1)); got != 1024 {
		t.Fatalf("a new segment is %d bytes, want the 1024 allocated", got)
	}
	mustDo(t, w.Append(raft.HardState{Term: 1}, entries(1, 2, 1)))
	mustDo(t, w.Close())
	for i := uint64(0); i < 3; i++ {
		w, st, err := Open(fsys, "/wal", preallocOptions(preallocQuiet))
		mustDo(t, err)
		if !entriesEqual(st.Entries, entries(1, 2+2*i, 1)) {
			t.Fatalf("reopen %d: recovered %d entries, want %d", i, len(st.Entries), 2+2*i)
		}
		if got := len(segmentFile(t, fsys, 1)); got != 1024 {
			t.Fatalf("reopen %d: the segment is %d bytes, want the 1024 allocated", i, got)
		}
		mustDo(t, w.Append(raft.HardState{Term: 1}, entries(3+2*i, 2, 1)))
		mustDo(t, w.Sync())
		mustDo(t, w.Close())
		fsys.Crash()
	}
	// Past the first step, the segment grows by another.
	w, _, err = Open(fsys, "/wal", preallocOptions(preallocQuiet))
	mustDo(t, err)
	for w.size <= 1024 {
		mustDo(t, w.Append(raft.HardState{}, entries(w.lastIndex+1, 1, 1)))
	}
	mustDo(t, w.Sync())
	if got := len(segmentFile(t, fsys, 1)); got != 2048 {
		t.Fatalf("after writing past the first step the segment is %d bytes, want 2048", got)
	}
	last := w.lastIndex
	mustDo(t, w.Close())
	fsys.Crash()
	_, st, err := Open(fsys, "/wal", preallocOptions(preallocQuiet))
	mustDo(t, err)
	if st.LastIndex() != last {
		t.Fatalf("recovered up to %d, want %d", st.LastIndex(), last)
	}
}

// A batch torn at any byte, the rest of it left as the allocated zeros,
// is a torn tail: Open truncates it (and logs it), and a shorter batch
// appended after it is read back without the torn batch's later records
// (which would still be valid where they lie had Open only written over
// them).
func TestPreallocatedTornBatchThenZeros(t *testing.T) {
	second := entries(3, 3, 1)
	for cut := 1; ; cut++ {
		fsys := vfs.NewMemFS()
		w, _, err := Open(fsys, "/wal", preallocOptions(preallocQuiet))
		mustDo(t, err)
		mustDo(t, w.Append(raft.HardState{Term: 1}, entries(1, 2, 1)))
		mustDo(t, w.Sync())
		end := w.size
		mustDo(t, w.Append(raft.HardState{Term: 1, Commit: 2}, second))
		batchBytes := w.size - end
		if int64(cut) >= batchBytes {
			break
		}
		mustDo(t, w.Close())
		written := segmentFile(t, fsys, 1)[end+int64(cut) : end+batchBytes]
		// Only the first cut bytes of the second batch reached the disk.
		overwrite(t, fsys, 1, end+int64(cut), make([]byte, batchBytes-int64(cut)))
		if !bytes.ContainsFunc(written, func(r rune) bool { return r != 0 }) {
			// The bytes that did not reach the disk were zeros (the hard
			// state's commit ends in them): the allocated zeros complete
			// the batch, which is the batch written.
			_, st, err := Open(fsys, "/wal", preallocOptions(preallocQuiet))
			mustDo(t, err)
			if !entriesEqual(st.Entries, append(entries(1, 2, 1), second...)) || st.HardState.Commit != 2 {
				t.Fatalf("cut %d: a batch completed by zeros recovered as %d entries, commit %d", cut, len(st.Entries), st.HardState.Commit)
			}
			continue
		}

		var logged bytes.Buffer
		w, st, err := Open(fsys, "/wal", preallocOptions(slog.New(slog.NewTextHandler(&logged, nil))))
		if err != nil {
			t.Fatalf("cut %d of %d: %v", cut, batchBytes, err)
		}
		if !strings.Contains(logged.String(), "truncating torn tail") {
			t.Fatalf("cut %d: the torn batch was not logged: %q", cut, logged.String())
		}
		if !entriesEqual(st.Entries, entries(1, 2, 1)) || st.HardState.Commit != 0 {
			t.Fatalf("cut %d: recovered %d entries, commit %d: want the first batch only", cut, len(st.Entries), st.HardState.Commit)
		}
		short := []raft.Entry{{Term: 1, Index: 3}}
		mustDo(t, w.Append(raft.HardState{}, short))
		mustDo(t, w.Sync())
		fsys.Crash()
		if _, st, err = Open(fsys, "/wal", preallocOptions(preallocQuiet)); err != nil {
			t.Fatalf("cut %d: reopening after a batch written over the torn one: %v", cut, err)
		}
		if st.LastIndex() != 3 {
			t.Fatalf("cut %d: recovered up to %d after appending entry 3", cut, st.LastIndex())
		}
	}
}

// Zeros where records belong are corruption: in a sealed segment before
// its end record, and in the last segment when a valid record follows.
// After a sealed segment's end record, the allocated zeros are fine, but
// anything else there is not.
func TestPreallocatedZerosInTheMiddle(t *testing.T) {
	build := func(t *testing.T) (*vfs.MemFS, []int64) {
		fsys := vfs.NewMemFS()
		w, _, err := Open(fsys, "/wal", Options{SegmentBytes: 1024, PreallocateBytes: 1024, Logger: preallocQuiet})
		mustDo(t, err)
		var ends []int64 // batch ends in segment 1
		for i := uint64(1); len(w.segments) < 3; i++ {
			if len(w.segments) == 1 {
				ends = append(ends, w.size)
			}
			mustDo(t, w.Append(raft.HardState{Term: 1, Commit: i}, entries(i, 1, 1)))
		}
		mustDo(t, w.Close())
		return fsys, ends
	}
	open := func(fsys vfs.FS) error {
		_, _, err := Open(fsys, "/wal", Options{SegmentBytes: 1024, PreallocateBytes: 1024, Logger: preallocQuiet})
		return err
	}
	t.Run("intact", func(t *testing.T) {
		fsys, _ := build(t)
		if data := segmentFile(t, fsys, 1); len(data) != 1024 || data[1023] != 0 {
			t.Fatalf("sealed segment of %d bytes, want 1024 ending in allocated zeros", len(data))
		}
		mustDo(t, open(fsys))
	})
	t.Run("sealed", func(t *testing.T) {
		fsys, ends := build(t)
		overwrite(t, fsys, 1, ends[2], make([]byte, ends[3]-ends[2]))
		if err := open(fsys); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("zeros in a sealed segment: %v, want ErrCorrupt", err)
		}
	})
	t.Run("sealed tail", func(t *testing.T) {
		fsys, _ := build(t)
		data := segmentFile(t, fsys, 1)
		overwrite(t, fsys, 1, int64(len(data))-4, []byte{1})
		if err := open(fsys); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("a byte in a sealed segment's zero tail: %v, want ErrCorrupt", err)
		}
	})
	t.Run("last", func(t *testing.T) {
		fsys, _ := build(t)
		data := segmentFile(t, fsys, 3)
		records, err := parseSegment(data, 3, true)
		mustDo(t, err)
		if len(records.records) < 2 {
			t.Fatalf("the last segment holds %d records, want at least 2", len(records.records))
		}
		r := records.records[0]
		overwrite(t, fsys, 3, r.offset, make([]byte, recordHeaderSize+len(r.payload)))
		if err := open(fsys); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("zeros before a valid record in the last segment: %v, want ErrCorrupt", err)
		}
	})
}
