package snapshot_test

import (
	"encoding/binary"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"

	"coord/storage/snapshot"
	"coord/storage/vfs"
)

// TestHeaderFaults gives a file with each fault of the header to the three
// readers of a snapshot file (Read, Stat, and a Source read to its end):
// each fault gets the same answer from all three, the error and the words
// of parseHeader. A bad checksum is a fault only Read and a Source can
// see: Stat reads neither the data nor the trailer.
func TestHeaderFaults(t *testing.T) {
	good := written(t)
	_, sum, err := snapshot.Read(memFile(t, good), "/"+snapshot.FileName(42, 7))
	must(t, err)
	edit := func(f func(b []byte)) []byte { b := slices.Clone(good); f(b); return reseal(b) }
	tests := []struct {
		name    string
		file    []byte
		want    error
		text    string
		statSee bool // Stat sees the fault too
	}{
		{"short", good[:headerSize-1], snapshot.ErrCorrupt, "truncated", true},
		{"bad magic", edit(func(b []byte) { copy(b, "coordSNQ") }), snapshot.ErrCorrupt, "bad magic", true},
		{"version 0", edit(func(b []byte) { binary.LittleEndian.PutUint32(b[8:], 0) }), snapshot.ErrCorrupt, "format version 0", true},
		{"future version", edit(func(b []byte) { binary.LittleEndian.PutUint32(b[8:], 3) }), snapshot.ErrUnsupported, "format version 3", true},
		{"length field set in version 2", edit(func(b []byte) { b[16] = 1 }), snapshot.ErrCorrupt, "want 0", true},
		{"huge metadata", edit(func(b []byte) { binary.LittleEndian.PutUint32(b[12:], 1<<31) }), snapshot.ErrCorrupt, "metadata of", true},
		{"bad checksum", func() []byte { b := slices.Clone(good); b[len(b)-1] ^= 0x80; return b }(), snapshot.ErrCorrupt, "checksum", false},
	}
	path := "/" + snapshot.FileName(42, 7)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := memFile(t, tt.file)
			_, _, readErr := snapshot.Read(m, path)
			_, _, statErr := snapshot.Stat(m, path)
			sourceErr := readAllSource(snapshot.NewSource(m, path, int64(len(sample().Data)), sum))
			checks := []struct {
				reader string
				err    error
			}{{"Read", readErr}, {"Source", sourceErr}}
			if tt.statSee {
				checks = append(checks, struct {
					reader string
					err    error
				}{"Stat", statErr})
			} else if statErr != nil {
				t.Errorf("Stat: %v, want nil: Stat does not read the checksum", statErr)
			}
			for _, c := range checks {
				if !errors.Is(c.err, tt.want) || !strings.Contains(c.err.Error(), tt.text) {
					t.Errorf("%s: %v, want %v mentioning %q", c.reader, c.err, tt.want, tt.text)
				}
			}
		})
	}
}

// headerSize is the length of a snapshot file's fixed header (the package
// doc's format).
const headerSize = 24

// memFile returns a MemFS holding b as the sample's file.
func memFile(t *testing.T, b []byte) *vfs.MemFS {
	t.Helper()
	m := vfs.NewMemFS()
	f, err := m.Create("/" + snapshot.FileName(42, 7))
	must(t, err)
	_, err = f.Write(b)
	must(t, err)
	must(t, f.Close())
	return m
}

// readAllSource opens s and reads its data to the end.
func readAllSource(s *snapshot.Source) error {
	r, err := s.Open()
	if err != nil {
		return err
	}
	defer r.Close()
	_, err = io.ReadAll(r)
	return err
}
