package snapshot_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"coord/raft"
	"coord/storage/snapshot"
	"coord/storage/vfs"
)

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func sample() raft.Snapshot {
	return raft.Snapshot{
		Metadata: raft.SnapshotMetadata{
			Index: 42, Term: 7,
			ConfState: raft.ConfState{Voters: []uint64{1, 2, 3}, Learners: []uint64{4}, VotersOutgoing: []uint64{1, 2, 5}},
		},
		Data: []byte("the state machine"),
	}
}

func equal(a, b raft.Snapshot) bool {
	return a.Metadata.Index == b.Metadata.Index && a.Metadata.Term == b.Metadata.Term &&
		slices.Equal(a.Metadata.ConfState.Voters, b.Metadata.ConfState.Voters) &&
		slices.Equal(a.Metadata.ConfState.Learners, b.Metadata.ConfState.Learners) &&
		slices.Equal(a.Metadata.ConfState.VotersOutgoing, b.Metadata.ConfState.VotersOutgoing) &&
		bytes.Equal(a.Data, b.Data)
}

func TestWriteRead(t *testing.T) {
	for name, fsys := range map[string]vfs.FS{"OS": vfs.OS, "MemFS": vfs.NewMemFS()} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			if name == "MemFS" {
				dir = "/snap"
				must(t, fsys.MkdirAll(dir))
			}
			for _, snap := range []raft.Snapshot{sample(), {Metadata: raft.SnapshotMetadata{Index: 1, Term: 1}}} {
				fileName, sum, err := snapshot.Write(fsys, dir, snap)
				must(t, err)
				if fileName != snapshot.FileName(snap.Metadata.Index, snap.Metadata.Term) {
					t.Fatalf("Write named the file %s", fileName)
				}
				got, gotSum, err := snapshot.Read(fsys, filepath.Join(dir, fileName))
				must(t, err)
				if !equal(got, snap) || gotSum != sum {
					t.Fatalf("read %+v (checksum %x), wrote %+v (checksum %x)", got, gotSum, snap, sum)
				}
			}
			files, tmps, err := snapshot.List(fsys, dir)
			must(t, err)
			if len(files) != 2 || files[0].Index != 1 || files[1].Index != 42 || files[1].Term != 7 || len(tmps) != 0 {
				t.Fatalf("List = %+v, %q", files, tmps)
			}
		})
	}
}

func TestWriteEmpty(t *testing.T) {
	if _, _, err := snapshot.Write(vfs.NewMemFS(), "/", raft.Snapshot{}); !errors.Is(err, snapshot.ErrEmpty) {
		t.Fatalf("Write of an empty snapshot: %v, want ErrEmpty", err)
	}
}

func TestFileName(t *testing.T) {
	name := snapshot.FileName(0x2a, 7)
	if name != "000000000000002a-0000000000000007.snap" {
		t.Fatalf("FileName = %s", name)
	}
	if i, term, ok := snapshot.ParseFileName(name); !ok || i != 0x2a || term != 7 {
		t.Fatalf("ParseFileName(%s) = %d, %d, %v", name, i, term, ok)
	}
	for _, bad := range []string{"x.snap", "000000000000002a-0000000000000007.snap.tmp", "000000000000002a_0000000000000007.snap", "zz00000000000000-0000000000000007.snap"} {
		if _, _, ok := snapshot.ParseFileName(bad); ok {
			t.Errorf("ParseFileName(%q) succeeded", bad)
		}
	}
}

// TestCrashDuringWrite crashes at every step of Write: afterwards the file
// under the final name is absent or complete, never partial.
func TestCrashDuringWrite(t *testing.T) {
	setup := func() *vfs.MemFS {
		m := vfs.NewMemFS()
		must(t, vfs.MkdirAllDurable(m, "/snap"))
		return m
	}
	dry := setup()
	base := dry.Ops()
	_, _, err := snapshot.Write(dry, "/snap", sample())
	must(t, err)
	total := dry.Ops() - base
	final := "/snap/" + snapshot.FileName(42, 7)
	sawComplete, sawAbsent := false, false
	for point := 1; point <= total; point++ {
		for mode := range 3 {
			m := setup()
			m.SetCrashPoint(point)
			_, _, err := snapshot.Write(m, "/snap", sample())
			if !errors.Is(err, vfs.ErrCrashed) {
				t.Fatalf("point %d: Write returned %v, want ErrCrashed", point, err)
			}
			if mode == 0 {
				m.Crash()
			} else {
				m.CrashTorn(rand.New(rand.NewPCG(uint64(point), uint64(mode))))
			}
			got, _, err := snapshot.Read(m, final)
			switch {
			case errors.Is(err, fs.ErrNotExist):
				sawAbsent = true
			case err != nil:
				t.Fatalf("point %d mode %d: a partial file under the final name: %v", point, mode, err)
			case !equal(got, sample()):
				t.Fatalf("point %d mode %d: read %+v", point, mode, got)
			default:
				sawComplete = true
			}
		}
	}
	if !sawComplete || !sawAbsent {
		t.Fatalf("over %d crash points: complete seen %v, absent seen %v; want both", total, sawComplete, sawAbsent)
	}
	// Once Write returned, a strict crash keeps the file.
	m := setup()
	_, _, err = snapshot.Write(m, "/snap", sample())
	must(t, err)
	m.Crash()
	if _, _, err := snapshot.Read(m, final); err != nil {
		t.Fatalf("after Write returned and a crash: %v", err)
	}
}

func TestLeftoverTmpIsListed(t *testing.T) {
	m2 := vfs.NewMemFS()
	must(t, m2.MkdirAll("/snap"))
	f, err := m2.Create("/snap/" + snapshot.FileName(42, 7) + ".tmp")
	must(t, err)
	must(t, f.Close())
	files, tmps, err := snapshot.List(m2, "/snap")
	must(t, err)
	if len(files) != 0 || len(tmps) != 1 {
		t.Fatalf("List = %+v, %q: want one tmp and no snapshot", files, tmps)
	}
	if files, tmps, err := snapshot.List(m2, "/missing"); err != nil || files != nil || tmps != nil {
		t.Fatalf("List of a missing directory = %v, %v, %v", files, tmps, err)
	}
}

// written returns the bytes of the sample snapshot's file.
func written(t *testing.T) []byte {
	m := vfs.NewMemFS()
	name, _, err := snapshot.Write(m, "/", sample())
	must(t, err)
	data, err := vfs.ReadFile(m, "/"+name)
	must(t, err)
	return data
}

// readBytes writes data under the sample's file name and reads it.
func readBytes(t *testing.T, data []byte) error {
	m := vfs.NewMemFS()
	name := "/" + snapshot.FileName(42, 7)
	f, err := m.Create(name)
	must(t, err)
	_, err = f.Write(data)
	must(t, err)
	must(t, f.Close())
	_, _, err = snapshot.Read(m, name)
	return err
}

func reseal(b []byte) []byte {
	n := len(b) - 4
	binary.LittleEndian.PutUint32(b[n:], crc32.Checksum(b[:n], crc32.MakeTable(crc32.Castagnoli)))
	return b
}

func TestBadFiles(t *testing.T) {
	good := written(t)
	tests := []struct {
		name string
		data func() []byte
		want error
		text string
	}{
		{"truncated header", func() []byte { return good[:10] }, snapshot.ErrCorrupt, "truncated"},
		{"truncated data", func() []byte { return good[:len(good)-7] }, snapshot.ErrCorrupt, "truncated"},
		{"padded", func() []byte { return append(slices.Clone(good), 0) }, snapshot.ErrCorrupt, "padded"},
		{"bad magic", func() []byte { b := slices.Clone(good); copy(b, "GIF89a.."); return b }, snapshot.ErrCorrupt, "bad magic"},
		{"newer version", func() []byte { b := slices.Clone(good); b[8] = 3; return b }, snapshot.ErrUnsupported, "version 3"},
		{"version 0", func() []byte { b := slices.Clone(good); b[8] = 0; return b }, snapshot.ErrCorrupt, "version 0"},
		{"flipped data bit", func() []byte { b := slices.Clone(good); b[len(b)-14] ^= 0x10; return b }, snapshot.ErrCorrupt, "checksum"},
		{"huge data length", func() []byte {
			b := slices.Clone(good)
			binary.LittleEndian.PutUint64(b[len(b)-12:], 1<<63)
			return reseal(b)
		}, snapshot.ErrCorrupt, "truncated"},
		{"version 1's length field set", func() []byte {
			b := slices.Clone(good)
			binary.LittleEndian.PutUint64(b[16:], 5)
			return reseal(b)
		}, snapshot.ErrCorrupt, "want 0"},
		{"membership list too long", func() []byte {
			b := slices.Clone(good)
			binary.LittleEndian.PutUint32(b[24+16:], 1000) // the voter count
			return reseal(b)
		}, snapshot.ErrCorrupt, "membership list"},
		{"name does not match", func() []byte {
			b := slices.Clone(good)
			b[24] = 43 // index 43 in a file named for 42
			return reseal(b)
		}, snapshot.ErrCorrupt, "index 43"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := readBytes(t, tt.data())
			if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.text) {
				t.Fatalf("got %v, want %v mentioning %q", err, tt.want, tt.text)
			}
		})
	}
}

// TestEveryBitFlipDetected flips every bit of a snapshot file.
func TestEveryBitFlipDetected(t *testing.T) {
	good := written(t)
	for i := range len(good) * 8 {
		b := slices.Clone(good)
		b[i/8] ^= 1 << (i % 8)
		err := readBytes(t, b)
		if !errors.Is(err, snapshot.ErrCorrupt) && !errors.Is(err, snapshot.ErrUnsupported) {
			t.Fatalf("bit %d flipped: %v", i, err)
		}
	}
}

func TestReadMissing(t *testing.T) {
	_, _, err := snapshot.Read(vfs.NewMemFS(), "/nope.snap")
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Read of a missing file: %v, want fs.ErrNotExist", err)
	}
}

func Example() {
	fsys := vfs.NewMemFS()
	snap := raft.Snapshot{
		Metadata: raft.SnapshotMetadata{Index: 10, Term: 2, ConfState: raft.ConfState{Voters: []uint64{1, 2, 3}}},
		Data:     []byte("state"),
	}
	name, _, err := snapshot.Write(fsys, "/", snap)
	if err != nil {
		fmt.Println(err)
		return
	}
	got, _, err := snapshot.Read(fsys, "/"+name)
	fmt.Println(name, got.Metadata.Index, got.Metadata.ConfState.Voters, string(got.Data), err)
	// Output: 000000000000000a-0000000000000002.snap 10 [1 2 3] state <nil>
}

// versionOne returns the sample snapshot as version 1 wrote it: the data's
// length in the header, only the checksum after the data.
func versionOne() []byte {
	snap := sample()
	var meta []byte
	meta = binary.LittleEndian.AppendUint64(meta, snap.Metadata.Index)
	meta = binary.LittleEndian.AppendUint64(meta, snap.Metadata.Term)
	cs := snap.Metadata.ConfState
	for _, ids := range [][]uint64{cs.Voters, cs.Learners, cs.VotersOutgoing} {
		meta = binary.LittleEndian.AppendUint32(meta, uint32(len(ids)))
		for _, id := range ids {
			meta = binary.LittleEndian.AppendUint64(meta, id)
		}
	}
	b := []byte("coordSNP")
	b = binary.LittleEndian.AppendUint32(b, 1)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(meta)))
	b = binary.LittleEndian.AppendUint64(b, uint64(len(snap.Data)))
	b = append(append(b, meta...), snap.Data...)
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli)))
}

// TestReadsVersionOne reads a file written before snapshots were streamed.
func TestReadsVersionOne(t *testing.T) {
	m := vfs.NewMemFS()
	name := "/" + snapshot.FileName(42, 7)
	f, err := m.Create(name)
	must(t, err)
	_, err = f.Write(versionOne())
	must(t, err)
	must(t, f.Close())
	got, _, err := snapshot.Read(m, name)
	must(t, err)
	if !equal(got, sample()) {
		t.Fatalf("read %+v, want %+v", got, sample())
	}
	bad := versionOne()
	bad[len(bad)-6] ^= 1
	if err := readBytes(t, bad); !errors.Is(err, snapshot.ErrCorrupt) {
		t.Fatalf("a flipped bit in a version 1 file: %v, want ErrCorrupt", err)
	}
}

// TestWriterStreams writes the data in many pieces, and reads back the
// same snapshot as one Write of all of it.
func TestWriterStreams(t *testing.T) {
	m := vfs.NewMemFS()
	must(t, m.MkdirAll("/snap"))
	want := sample()
	want.Data = bytes.Repeat([]byte("0123456789abcdef"), 10000)
	w, err := snapshot.Create(m, "/snap", want.Metadata)
	must(t, err)
	for p := want.Data; len(p) > 0; {
		n := min(len(p), 1000)
		_, err := w.Write(p[:n])
		must(t, err)
		p = p[n:]
	}
	sum, err := w.Commit()
	must(t, err)
	got, gotSum, err := snapshot.Read(m, "/snap/"+w.Name())
	must(t, err)
	if !equal(got, want) || gotSum != sum {
		t.Fatalf("read %d bytes of data, checksum %#x; want %d bytes, checksum %#x", len(got.Data), gotSum, len(want.Data), sum)
	}
	if _, err := w.Write([]byte("x")); err == nil {
		t.Fatal("Write after Commit succeeded")
	}
}

// TestWriterAbort leaves nothing behind, not even the temporary file.
func TestWriterAbort(t *testing.T) {
	m := vfs.NewMemFS()
	must(t, m.MkdirAll("/snap"))
	w, err := snapshot.Create(m, "/snap", sample().Metadata)
	must(t, err)
	_, err = w.Write([]byte("half"))
	must(t, err)
	must(t, w.Abort())
	files, tmps, err := snapshot.List(m, "/snap")
	must(t, err)
	if len(files) != 0 || len(tmps) != 0 {
		t.Fatalf("after Abort: files %+v, temporary files %q; want none", files, tmps)
	}
	if _, err := w.Commit(); err == nil {
		t.Fatal("Commit after Abort succeeded")
	}
}

// TestWriterRefusesMetadataReadersRefuse: metadata at the readers' limit
// is written and read back; one ID more is refused by Create, with
// ErrMetadataTooLarge, before any file is made, so that nothing is written
// that no reader accepts.
func TestWriterRefusesMetadataReadersRefuse(t *testing.T) {
	ids := func(n int) []uint64 {
		out := make([]uint64, n)
		for i := range out {
			out[i] = uint64(i + 1)
		}
		return out
	}
	atLimit := int(snapshot.MaxMetadataBytes-16-3*4) / 8 // IDs in the three lists together
	m := vfs.NewMemFS()
	must(t, m.MkdirAll("/snap"))
	fits := raft.Snapshot{
		Metadata: raft.SnapshotMetadata{Index: 42, Term: 7, ConfState: raft.ConfState{Voters: ids(atLimit - 2), Learners: ids(1), VotersOutgoing: ids(1)}},
		Data:     []byte("state"),
	}
	name, _, err := snapshot.Write(m, "/snap", fits)
	must(t, err)
	got, _, err := snapshot.Read(m, filepath.Join("/snap", name))
	must(t, err)
	if !equal(got, fits) {
		t.Fatalf("metadata at the limit: read back %d voters, want %d", len(got.Metadata.ConfState.Voters), atLimit-2)
	}
	must(t, m.Remove(filepath.Join("/snap", name)))

	over := fits
	over.Metadata.ConfState.Learners = ids(2)
	if _, _, err := snapshot.Write(m, "/snap", over); !errors.Is(err, snapshot.ErrMetadataTooLarge) || !strings.Contains(err.Error(), "2 learners") {
		t.Fatalf("Write of metadata one ID over the limit: %v, want ErrMetadataTooLarge naming the lists", err)
	}
	if _, err := snapshot.CreateTemp(m, "/snap", over.Metadata, "received.tmp"); !errors.Is(err, snapshot.ErrMetadataTooLarge) {
		t.Fatalf("CreateTemp of metadata one ID over the limit: %v, want ErrMetadataTooLarge", err)
	}
	files, tmps, err := snapshot.List(m, "/snap")
	must(t, err)
	if len(files) != 0 || len(tmps) != 0 {
		t.Fatalf("after the refusals: files %+v, temporary files %q; want none", files, tmps)
	}
}
