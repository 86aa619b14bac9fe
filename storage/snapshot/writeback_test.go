package snapshot

import (
	"bytes"
	"errors"
	"io/fs"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"coord/raft"
	"coord/storage/vfs"
)

// streamSnapshot writes a snapshot of pieces pieces of pieceBytes each,
// streamed, and commits it.
func streamSnapshot(fsys vfs.FS, meta raft.SnapshotMetadata, pieces, pieceBytes int) error {
	w, err := Create(fsys, "/snap", meta)
	if err != nil {
		return err
	}
	piece := bytes.Repeat([]byte{'d'}, pieceBytes)
	for range pieces {
		if _, err := w.Write(piece); err != nil {
			return errors.Join(err, w.Abort())
		}
	}
	_, err = w.Commit()
	return err
}

var streamMeta = raft.SnapshotMetadata{Index: 42, Term: 7, ConfState: raft.ConfState{Voters: []uint64{1, 2, 3}}}

// TestWriterWritesBackAsItGoes: a snapshot streamed in many pieces is
// written back every writeBackBytes of data, not left dirty for its
// final fsync (which would stall the write-ahead log's fsyncs behind it).
func TestWriterWritesBackAsItGoes(t *testing.T) {
	const pieces, pieceBytes = 40, 64 << 10 // 2.5 MiB
	var syncs []int                         // the data written when the temporary file was synced
	written := 0
	inj := func(op vfs.Op) vfs.Fault {
		switch {
		case !strings.HasSuffix(op.Name, tmpSuffix):
		case op.Kind == vfs.OpWrite:
			written++
		case op.Kind == vfs.OpSync:
			syncs = append(syncs, written)
		}
		return vfs.NoFault
	}
	m := vfs.NewMemFS()
	if err := vfs.MkdirAllDurable(m, "/snap"); err != nil {
		t.Fatal(err)
	}
	if err := streamSnapshot(vfs.NewFaultFS(m, 1, inj), streamMeta, pieces, pieceBytes); err != nil {
		t.Fatal(err)
	}
	// Writes: the head, the pieces, the trailer. The write-backs come
	// after the 16th and 32nd pieces (1 MiB each), then Seal's fsync.
	want := []int{1 + 16, 1 + 32, 1 + pieces + 1}
	if !slices.Equal(syncs, want) {
		t.Fatalf("the temporary file synced after writes %v; want %v (every %d bytes of data, then the seal)", syncs, want, writeBackBytes)
	}
	if _, _, err := Read(m, filepath.Join("/snap", FileName(42, 7))); err != nil {
		t.Fatalf("the snapshot written back as it went: %v", err)
	}
}

// TestWriterWriteBackFails: a write-back that fails fails the Write that
// called it, and every later call; Abort leaves no file under the final
// name, nor a temporary one.
func TestWriterWriteBackFails(t *testing.T) {
	m := vfs.NewMemFS()
	if err := vfs.MkdirAllDurable(m, "/snap"); err != nil {
		t.Fatal(err)
	}
	w, err := Create(vfs.NewFaultFS(m, 1, vfs.FailNth(1, vfs.FaultError, vfs.OpSync)), "/snap", streamMeta)
	if err != nil {
		t.Fatal(err)
	}
	piece := bytes.Repeat([]byte{'d'}, 64<<10)
	failedAt := -1
	for i := range 40 {
		if _, err := w.Write(piece); err != nil {
			if !errors.Is(err, vfs.ErrInjected) {
				t.Fatalf("piece %d: %v, want ErrInjected", i, err)
			}
			failedAt = i
			break
		}
	}
	if failedAt != 15 {
		t.Fatalf("the failed write-back failed the Write of piece %d; want piece 15, the one that completes the first MiB", failedAt)
	}
	if _, err := w.Commit(); !errors.Is(err, vfs.ErrInjected) {
		t.Fatalf("Commit after a failed write-back: %v, want ErrInjected", err)
	}
	files, tmps, err := List(m, "/snap")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 0 || len(tmps) != 0 {
		t.Fatalf("after a failed write-back: files %+v, temporary files %q; want none", files, tmps)
	}
}

// TestCrashDuringStreamedWrite crashes at every step of a snapshot
// streamed over several write-backs: the final name holds the whole
// snapshot or nothing, and a previous snapshot stays readable.
func TestCrashDuringStreamedWrite(t *testing.T) {
	const pieces, pieceBytes = 12, 256 << 10 // 3 MiB: three write-backs
	older := raft.SnapshotMetadata{Index: 10, Term: 2, ConfState: streamMeta.ConfState}
	setup := func() *vfs.MemFS {
		m := vfs.NewMemFS()
		if err := vfs.MkdirAllDurable(m, "/snap"); err != nil {
			t.Fatal(err)
		}
		if err := streamSnapshot(m, older, 1, 100); err != nil {
			t.Fatal(err)
		}
		return m
	}
	dry := setup()
	base := dry.Ops()
	if err := streamSnapshot(dry, streamMeta, pieces, pieceBytes); err != nil {
		t.Fatal(err)
	}
	total := dry.Ops() - base
	sawComplete, sawAbsent := false, false
	for point := 1; point <= total; point++ {
		m := setup()
		m.SetCrashPoint(point)
		if err := streamSnapshot(m, streamMeta, pieces, pieceBytes); !errors.Is(err, vfs.ErrCrashed) {
			t.Fatalf("point %d: %v, want ErrCrashed", point, err)
		}
		m.CrashTorn(rand.New(rand.NewPCG(uint64(point), 1)))
		if _, _, err := Read(m, filepath.Join("/snap", FileName(older.Index, older.Term))); err != nil {
			t.Fatalf("point %d: the previous snapshot: %v", point, err)
		}
		got, _, err := Read(m, filepath.Join("/snap", FileName(42, 7)))
		switch {
		case errors.Is(err, fs.ErrNotExist):
			sawAbsent = true
		case err != nil:
			t.Fatalf("point %d: a partial file under the final name: %v", point, err)
		case len(got.Data) != pieces*pieceBytes:
			t.Fatalf("point %d: %d bytes of data, want %d", point, len(got.Data), pieces*pieceBytes)
		default:
			sawComplete = true
		}
	}
	if !sawComplete || !sawAbsent {
		t.Fatalf("over %d crash points: complete seen %v, absent seen %v; want both", total, sawComplete, sawAbsent)
	}
}
