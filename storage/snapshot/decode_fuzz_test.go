package snapshot

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io"
	"reflect"
	"testing"

	"coord/raft"
	"coord/storage/vfs"
)

// fuzzFile is the name the fuzz targets give a file: not a snapshot's name
// (FileName), so that Read and Stat check its content alone.
const fuzzFile = "fuzz"

// writeFile stores data as fsys's file name.
func writeFile(t testing.TB, fsys vfs.FS, name string, data []byte) {
	t.Helper()
	w, err := fsys.Create(name)
	if err == nil {
		_, err = w.Write(data)
	}
	if err = errors.Join(err, w.Close()); err != nil {
		t.Fatal(err)
	}
}

// encodeFile returns the bytes Write stores for snap.
func encodeFile(t testing.TB, snap raft.Snapshot) []byte {
	t.Helper()
	fsys := vfs.NewMemFS()
	name, _, err := Write(fsys, ".", snap)
	if err != nil {
		t.Fatal(err)
	}
	data, err := vfs.ReadFile(fsys, name)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// version1 rewrites a version 2 file as version 1 wrote it: the data's
// length in the header, only the checksum after the data.
func version1(data []byte) []byte {
	dataLen := binary.LittleEndian.Uint64(data[len(data)-trailerSizeV2:])
	v1 := bytes.Clone(data[:len(data)-trailerSizeV2])
	binary.LittleEndian.PutUint32(v1[8:], 1)
	binary.LittleEndian.PutUint64(v1[16:], dataLen)
	return binary.LittleEndian.AppendUint32(v1, crc32.Checksum(v1, castagnoli))
}

// FuzzSnapshotFile feeds arbitrary bytes, as a snapshot file on disk, to
// the three readers of the format: Read (decode), Stat, and a Source's
// reader. None may panic; errors wrap ErrCorrupt or ErrUnsupported; they
// agree (what Read accepts, Stat accepts with the same metadata and size,
// and a Source streams whole, and what Read refuses a Source refuses too);
// and an accepted snapshot written again (Write) reads back the same.
func FuzzSnapshotFile(f *testing.F) {
	snap := raft.Snapshot{
		Metadata: raft.SnapshotMetadata{Index: 42, Term: 7, ConfState: raft.ConfState{Voters: []uint64{1, 2, 3}, Learners: []uint64{4}}},
		Data:     []byte("the state machine's bytes"),
	}
	valid := encodeFile(f, snap)
	f.Add(valid)
	f.Add(version1(valid))
	f.Add(encodeFile(f, raft.Snapshot{Metadata: raft.SnapshotMetadata{Index: 1, Term: 1}})) // no data, no members
	f.Add(valid[:len(valid)-1])
	f.Add(valid[:headerSize+10]) // inside the metadata
	for _, at := range []int{0, 8, 12, 16, headerSize + 16, headerSize + 20, len(valid) - 20, len(valid) - 10, len(valid) - 2} {
		b := bytes.Clone(valid) // magic, version, lengths, a list's count, data, trailer
		b[at] ^= 0x01
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		fsys := vfs.NewMemFS()
		writeFile(t, fsys, fuzzFile, data)
		got, sum, readErr := Read(fsys, fuzzFile)
		if readErr != nil && !errors.Is(readErr, ErrCorrupt) && !errors.Is(readErr, ErrUnsupported) {
			t.Fatalf("Read: %v wraps neither ErrCorrupt nor ErrUnsupported", readErr)
		}
		meta, size, statErr := Stat(fsys, fuzzFile)
		if statErr != nil && !errors.Is(statErr, ErrCorrupt) && !errors.Is(statErr, ErrUnsupported) {
			t.Fatalf("Stat: %v wraps neither ErrCorrupt nor ErrUnsupported", statErr)
		}
		if readErr == nil && (statErr != nil || !reflect.DeepEqual(meta, got.Metadata) || size != int64(len(got.Data))) {
			t.Fatalf("Read took %+v and %d bytes of data; Stat says %+v, %d bytes (%v)", got.Metadata, len(got.Data), meta, size, statErr)
		}
		if statErr == nil {
			stored := binary.LittleEndian.Uint32(data[len(data)-trailerSize:])
			streamed, streamErr := readSource(NewSource(fsys, fuzzFile, size, stored))
			if streamErr != nil && !errors.Is(streamErr, ErrCorrupt) {
				t.Fatalf("Source: %v does not wrap ErrCorrupt", streamErr)
			}
			if (streamErr == nil) != (readErr == nil) {
				t.Fatalf("Source's reader says %v, Read %v", streamErr, readErr)
			}
			if readErr == nil && (!bytes.Equal(streamed, got.Data) || stored != sum) {
				t.Fatalf("Source streamed %q, Read took %q", streamed, got.Data)
			}
		}
		if readErr != nil {
			return
		}
		again, err := decodeOnly(encodeFile(t, got))
		if err != nil || !reflect.DeepEqual(again.Metadata, got.Metadata) || !bytes.Equal(again.Data, got.Data) {
			t.Fatalf("written again, read back as %+v (%v), want %+v", again, err, got)
		}
	})
}

// readSource reads the whole data of s.
func readSource(s *Source) ([]byte, error) {
	r, err := s.Open()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return io.ReadAll(r)
}

// decodeOnly is decode without the checksum.
func decodeOnly(data []byte) (raft.Snapshot, error) {
	snap, _, err := decode(data)
	return snap, err
}
