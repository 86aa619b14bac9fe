package snapshot

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"

	"coord/raft"
	"coord/storage/vfs"
)

// Errors.
var (
	// ErrCorrupt means a snapshot file is damaged: truncated, failing its
	// checksum, or not a snapshot file at all.
	ErrCorrupt = errors.New("snapshot: corrupt")
	// ErrUnsupported means the file was written by a newer format version.
	ErrUnsupported = errors.New("snapshot: unsupported format")
	// ErrEmpty is returned by Write for a snapshot at index 0, which stands
	// for "no snapshot".
	ErrEmpty = errors.New("snapshot: empty snapshot (index 0)")
)

const (
	magic         = "coordSNP"
	formatVersion = 1
	headerSize    = 24
	trailerSize   = 4
	tmpSuffix     = ".tmp"
	fileSuffix    = ".snap"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// FileName returns the name of the file for a snapshot at index and term.
func FileName(index, term uint64) string {
	return fmt.Sprintf("%016x-%016x%s", index, term, fileSuffix)
}

// ParseFileName returns the index and term in a snapshot file name.
func ParseFileName(name string) (index, term uint64, ok bool) {
	base, ok := strings.CutSuffix(name, fileSuffix)
	if !ok || len(base) != 33 || base[16] != '-' {
		return 0, 0, false
	}
	index, err1 := strconv.ParseUint(base[:16], 16, 64)
	term, err2 := strconv.ParseUint(base[17:], 16, 64)
	return index, term, err1 == nil && err2 == nil
}

// File is a snapshot file found by List.
type File struct {
	Name  string // base name, in the directory given to List
	Index uint64
	Term  uint64
}

// List returns the snapshot files in dir, ordered by index, and the names of
// leftover temporary files. A missing dir holds nothing.
func List(fsys vfs.FS, dir string) (files []File, tmps []string, err error) {
	names, err := fsys.List(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("snapshot: list %s: %w", dir, err)
	}
	for _, name := range names {
		if strings.HasSuffix(name, tmpSuffix) {
			tmps = append(tmps, name)
		} else if index, term, ok := ParseFileName(name); ok {
			files = append(files, File{Name: name, Index: index, Term: term})
		}
	}
	// The fixed-width names sort by index, then term.
	return files, tmps, nil
}

// encodeHead returns the header and metadata of snap.
func encodeHead(snap raft.Snapshot) []byte {
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
	head := make([]byte, headerSize, headerSize+len(meta))
	copy(head, magic)
	binary.LittleEndian.PutUint32(head[8:], formatVersion)
	binary.LittleEndian.PutUint32(head[12:], uint32(len(meta)))
	binary.LittleEndian.PutUint64(head[16:], uint64(len(snap.Data)))
	return append(head, meta...)
}

// Write stores snap in dir under FileName(index, term), atomically and
// durably (see the package doc), and returns the file's name and checksum.
// It replaces a file of the same name.
func Write(fsys vfs.FS, dir string, snap raft.Snapshot) (name string, checksum uint32, err error) {
	if snap.IsEmpty() {
		return "", 0, ErrEmpty
	}
	name = FileName(snap.Metadata.Index, snap.Metadata.Term)
	final := filepath.Join(dir, name)
	tmp := final + tmpSuffix
	if err := writeTmp(fsys, tmp, snap, &checksum); err != nil {
		// Best effort: a leftover tmp file is harmless and removed later.
		_ = fsys.Remove(tmp)
		return "", 0, fmt.Errorf("snapshot: write %s: %w", tmp, err)
	}
	if err := fsys.Rename(tmp, final); err != nil {
		return "", 0, fmt.Errorf("snapshot: rename %s: %w", tmp, err)
	}
	if err := fsys.SyncDir(dir); err != nil {
		return "", 0, fmt.Errorf("snapshot: sync directory %s: %w", dir, err)
	}
	return name, checksum, nil
}

func writeTmp(fsys vfs.FS, tmp string, snap raft.Snapshot, checksum *uint32) error {
	f, err := fsys.Create(tmp)
	if err != nil {
		return err
	}
	head := encodeHead(snap)
	crc := crc32.Update(crc32.Checksum(head, castagnoli), castagnoli, snap.Data)
	*checksum = crc
	// Three writes rather than one copy of a possibly large Data.
	err = writeAll(f, head, snap.Data, binary.LittleEndian.AppendUint32(nil, crc))
	if err == nil {
		err = f.Sync()
	}
	return errors.Join(err, f.Close())
}

func writeAll(f vfs.File, bufs ...[]byte) error {
	for _, b := range bufs {
		if _, err := f.Write(b); err != nil {
			return err
		}
	}
	return nil
}

// Read reads and verifies the snapshot file at path, and returns the
// snapshot and the file's checksum. Errors wrap ErrCorrupt, ErrUnsupported,
// or the file system's error (fs.ErrNotExist for a missing file).
func Read(fsys vfs.FS, path string) (raft.Snapshot, uint32, error) {
	data, err := vfs.ReadFile(fsys, path)
	if err != nil {
		return raft.Snapshot{}, 0, fmt.Errorf("snapshot: %w", err)
	}
	snap, checksum, err := decode(data)
	if err != nil {
		return raft.Snapshot{}, 0, fmt.Errorf("snapshot %s: %w", path, err)
	}
	if index, term, ok := ParseFileName(filepath.Base(path)); ok &&
		(index != snap.Metadata.Index || term != snap.Metadata.Term) {
		return raft.Snapshot{}, 0, fmt.Errorf("snapshot %s: %w: file holds index %d term %d",
			path, ErrCorrupt, snap.Metadata.Index, snap.Metadata.Term)
	}
	return snap, checksum, nil
}

// decode parses and verifies a snapshot file's bytes.
func decode(data []byte) (raft.Snapshot, uint32, error) {
	size := uint64(len(data))
	if size < headerSize+trailerSize {
		return raft.Snapshot{}, 0, fmt.Errorf("%w: truncated: %d bytes, shorter than a header", ErrCorrupt, size)
	}
	if string(data[:8]) != magic {
		return raft.Snapshot{}, 0, fmt.Errorf("%w: bad magic %q, want %q: not a coord snapshot", ErrCorrupt, data[:8], magic)
	}
	switch v := binary.LittleEndian.Uint32(data[8:]); {
	case v == 0:
		return raft.Snapshot{}, 0, fmt.Errorf("%w: format version 0", ErrCorrupt)
	case v != formatVersion:
		return raft.Snapshot{}, 0, fmt.Errorf("%w: format version %d, this build reads version %d", ErrUnsupported, v, formatVersion)
	}
	metaLen := uint64(binary.LittleEndian.Uint32(data[12:]))
	dataLen := binary.LittleEndian.Uint64(data[16:])
	// Compare without overflowing: dataLen comes from the file.
	if want := headerSize + metaLen + trailerSize; dataLen > size || want+dataLen != size {
		return raft.Snapshot{}, 0, fmt.Errorf("%w: truncated or padded: %d bytes, the header says %d of metadata and %d of data",
			ErrCorrupt, size, metaLen, dataLen)
	}
	body := data[:size-trailerSize]
	if got, want := binary.LittleEndian.Uint32(data[size-trailerSize:]), crc32.Checksum(body, castagnoli); got != want {
		return raft.Snapshot{}, 0, fmt.Errorf("%w: checksum %#08x, want %#08x", ErrCorrupt, got, want)
	}
	meta, err := decodeMetadata(data[headerSize : headerSize+metaLen])
	if err != nil {
		return raft.Snapshot{}, 0, err
	}
	snap := raft.Snapshot{Metadata: meta}
	if dataLen > 0 {
		snap.Data = data[headerSize+metaLen : size-trailerSize]
	}
	return snap, binary.LittleEndian.Uint32(data[size-trailerSize:]), nil
}

func decodeMetadata(p []byte) (raft.SnapshotMetadata, error) {
	bad := func(what string) (raft.SnapshotMetadata, error) {
		return raft.SnapshotMetadata{}, fmt.Errorf("%w: metadata: %s", ErrCorrupt, what)
	}
	if len(p) < 16 {
		return bad("shorter than index and term")
	}
	m := raft.SnapshotMetadata{Index: binary.LittleEndian.Uint64(p), Term: binary.LittleEndian.Uint64(p[8:])}
	p = p[16:]
	lists := []*[]uint64{&m.ConfState.Voters, &m.ConfState.Learners, &m.ConfState.VotersOutgoing}
	for _, list := range lists {
		if len(p) < 4 {
			return bad("membership list cut short")
		}
		n := uint64(binary.LittleEndian.Uint32(p))
		p = p[4:]
		if n > uint64(len(p))/8 {
			return bad(fmt.Sprintf("membership list of %d IDs in %d bytes", n, len(p)))
		}
		for range n {
			*list = append(*list, binary.LittleEndian.Uint64(p))
			p = p[8:]
		}
	}
	if len(p) != 0 {
		return bad(fmt.Sprintf("%d trailing bytes", len(p)))
	}
	if m.Index == 0 {
		return bad("index 0")
	}
	return m, nil
}
