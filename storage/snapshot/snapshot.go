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
	// ErrMetadataTooLarge is returned by Create (and Write) for metadata
	// longer than a reader accepts (a membership of more than 3×2^16
	// node IDs): such a file could be written but never read back.
	ErrMetadataTooLarge = errors.New("snapshot: metadata too large")
)

const (
	magic         = "coordSNP"
	formatVersion = 2
	headerSize    = 24
	trailerSize   = 4  // the checksum
	trailerSizeV2 = 12 // the data's length, then the checksum
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

// encodeHead returns the header and metadata of a version 2 file: the
// data's length goes in the trailer, so that the data can be streamed.
func encodeHead(meta raft.SnapshotMetadata) []byte {
	m := make([]byte, 0, metadataBytes(meta))
	m = binary.LittleEndian.AppendUint64(m, meta.Index)
	m = binary.LittleEndian.AppendUint64(m, meta.Term)
	cs := meta.ConfState
	for _, ids := range [][]uint64{cs.Voters, cs.Learners, cs.VotersOutgoing} {
		m = binary.LittleEndian.AppendUint32(m, uint32(len(ids)))
		for _, id := range ids {
			m = binary.LittleEndian.AppendUint64(m, id)
		}
	}
	head := make([]byte, headerSize, headerSize+len(m))
	copy(head, magic)
	binary.LittleEndian.PutUint32(head[8:], formatVersion)
	binary.LittleEndian.PutUint32(head[12:], uint32(len(m)))
	// head[16:24] stays zero: version 1 kept the data's length there.
	return append(head, m...)
}

// metadataBytes returns the length of meta encoded (encodeHead): index,
// term, and each membership list's count and IDs.
func metadataBytes(meta raft.SnapshotMetadata) int64 {
	cs := meta.ConfState
	return 16 + 3*4 + 8*int64(len(cs.Voters)+len(cs.Learners)+len(cs.VotersOutgoing))
}

// Write stores snap in dir under FileName(index, term), atomically and
// durably (see the package doc), and returns the file's name and checksum.
// It replaces a file of the same name.
func Write(fsys vfs.FS, dir string, snap raft.Snapshot) (name string, checksum uint32, err error) {
	if snap.IsEmpty() {
		return "", 0, ErrEmpty
	}
	w, err := Create(fsys, dir, snap.Metadata)
	if err != nil {
		return "", 0, err
	}
	if _, err := w.Write(snap.Data); err != nil {
		return "", 0, errors.Join(err, w.Abort())
	}
	checksum, err = w.Commit()
	return w.Name(), checksum, err
}

// Writer writes one snapshot file as a stream: Create writes the header,
// Write appends the application's data in as many pieces as the caller
// likes (it need not know the size up front, nor hold it all), Commit
// makes the file durable under its final name, and Abort removes it. No
// byte is held in memory beyond the piece being written.
//
// A Writer is not safe for concurrent use, but it may be used from a
// goroutine other than the one that created it (a snapshot written in the
// background), concurrently with other files of the same FS.
type Writer struct {
	fsys      vfs.FS
	dir, name string
	tmpName   string   // the temporary file's base name in dir
	f         vfs.File // nil once sealed, committed or aborted
	crc       uint32
	dataBytes uint64
	err       error // the first failure; every later call returns it
	// unsyncedBytes is the data written since the last vfs.WriteBack.
	unsyncedBytes int
}

// writeBackBytes is how much data a Writer writes between two calls of
// vfs.WriteBack: a snapshot of hundreds of megabytes left dirty until its
// final fsync would stall the write-ahead log's fsyncs behind its flush.
// A variable so that tests can shrink it.
var writeBackBytes = 1 << 20

// Create starts the file for a snapshot with metadata meta in dir: it
// writes "<FileName>.tmp" (see the package doc) and returns a Writer for
// its data. ErrEmpty for index 0; ErrMetadataTooLarge for metadata a
// reader would refuse, before any file is made.
func Create(fsys vfs.FS, dir string, meta raft.SnapshotMetadata) (*Writer, error) {
	return CreateTemp(fsys, dir, meta, FileName(meta.Index, meta.Term)+tmpSuffix)
}

// CreateTemp is Create writing to the temporary file tmpName (a base name
// in dir ending in ".tmp", so that List reports a leftover one) instead
// of "<FileName>.tmp": a snapshot received from a leader is spooled so,
// beside the node's own, and sealed (Seal) rather than committed, until
// its owner adopts it (Adopt).
//
// Metadata longer than a reader accepts (parseHeader) is refused with
// ErrMetadataTooLarge before anything is written.
func CreateTemp(fsys vfs.FS, dir string, meta raft.SnapshotMetadata, tmpName string) (*Writer, error) {
	if meta.Index == 0 {
		return nil, ErrEmpty
	}
	if n := metadataBytes(meta); n > maxMetadataBytes {
		cs := meta.ConfState
		return nil, fmt.Errorf("%w: %d bytes (%d voters, %d learners, %d outgoing voters), over the %d bytes a reader accepts",
			ErrMetadataTooLarge, n, len(cs.Voters), len(cs.Learners), len(cs.VotersOutgoing), maxMetadataBytes)
	}
	if !strings.HasSuffix(tmpName, tmpSuffix) || filepath.Base(tmpName) != tmpName {
		return nil, fmt.Errorf("snapshot: temporary file name %q: want a base name ending in %q", tmpName, tmpSuffix)
	}
	w := &Writer{fsys: fsys, dir: dir, name: FileName(meta.Index, meta.Term), tmpName: tmpName}
	f, err := fsys.Create(w.tmp())
	if err != nil {
		return nil, fmt.Errorf("snapshot: create %s: %w", w.tmp(), err)
	}
	w.f = f
	head := encodeHead(meta)
	w.crc = crc32.Checksum(head, castagnoli)
	if _, err := f.Write(head); err != nil {
		return nil, errors.Join(w.fail(err), w.Abort())
	}
	return w, nil
}

// Name returns the file's base name in its directory (FileName).
func (w *Writer) Name() string { return w.name }

func (w *Writer) tmp() string { return filepath.Join(w.dir, w.tmpName) }

// TempPath returns the path of the file being written (and, after Seal,
// of the sealed file).
func (w *Writer) TempPath() string { return w.tmp() }

// Size returns how many bytes of data were written so far.
func (w *Writer) Size() int64 { return int64(w.dataBytes) }

// fail records the first failure and returns it, with context.
func (w *Writer) fail(err error) error {
	if w.err == nil {
		w.err = fmt.Errorf("snapshot: write %s: %w", w.tmp(), err)
	}
	return w.err
}

// Write appends p to the snapshot's data.
func (w *Writer) Write(p []byte) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	if w.f == nil {
		return 0, w.fail(errors.New("write after Commit or Abort"))
	}
	n, err := w.f.Write(p)
	w.crc = crc32.Update(w.crc, castagnoli, p[:n])
	w.dataBytes += uint64(n)
	if err != nil {
		return n, w.fail(err)
	}
	if w.unsyncedBytes += n; w.unsyncedBytes >= writeBackBytes {
		w.unsyncedBytes = 0
		if err := vfs.WriteBack(w.f); err != nil {
			return n, w.fail(err)
		}
	}
	return n, nil
}

// Commit writes the trailer, fsyncs the file, renames it to its final
// name and fsyncs the directory, and returns the file's checksum. After a
// failure the temporary file is removed (best effort: a leftover one is
// harmless, and its directory's owner removes it later).
func (w *Writer) Commit() (checksum uint32, err error) {
	if _, err := w.Seal(); err != nil {
		return 0, err
	}
	if err := Adopt(w.fsys, w.dir, w.tmpName, w.name); err != nil {
		_ = w.fsys.Remove(w.tmp())
		w.err = err
		return 0, w.err
	}
	return w.crc, nil
}

// Seal writes the trailer, fsyncs the file and closes it, and returns the
// file's checksum; the file stays under its temporary name (TempPath)
// until Adopt. After a failure the temporary file is removed (best
// effort).
func (w *Writer) Seal() (checksum uint32, err error) {
	if w.err != nil {
		return 0, errors.Join(w.err, w.Abort())
	}
	if w.f == nil {
		return 0, w.fail(errors.New("Seal or Commit after Seal, Commit or Abort"))
	}
	trailer := binary.LittleEndian.AppendUint64(nil, w.dataBytes)
	w.crc = crc32.Update(w.crc, castagnoli, trailer)
	trailer = binary.LittleEndian.AppendUint32(trailer, w.crc)
	f := w.f
	w.f = nil
	_, err = f.Write(trailer)
	if err == nil {
		err = f.Sync()
	}
	if err = errors.Join(err, f.Close()); err != nil {
		_ = w.fsys.Remove(w.tmp())
		return 0, w.fail(err)
	}
	return w.crc, nil
}

// Adopt makes the sealed temporary file tmpName in dir the snapshot file
// name: it renames it and fsyncs the directory (the last steps of the
// write protocol).
func Adopt(fsys vfs.FS, dir, tmpName, name string) error {
	if err := fsys.Rename(filepath.Join(dir, tmpName), filepath.Join(dir, name)); err != nil {
		return fmt.Errorf("snapshot: rename %s to %s: %w", tmpName, name, err)
	}
	if err := fsys.SyncDir(dir); err != nil {
		return fmt.Errorf("snapshot: sync directory %s: %w", dir, err)
	}
	return nil
}

// Abort abandons the file: it closes and removes the temporary file. It
// does nothing after Commit succeeded, or after Abort.
func (w *Writer) Abort() error {
	if w.f == nil {
		return nil
	}
	f := w.f
	w.f = nil
	if w.err == nil {
		w.err = fmt.Errorf("snapshot: write %s: aborted", w.tmp())
	}
	return errors.Join(f.Close(), w.fsys.Remove(w.tmp()))
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

// decode parses and verifies a snapshot file's bytes, of either version.
func decode(data []byte) (raft.Snapshot, uint32, error) {
	size := uint64(len(data))
	h, err := parseHeader(data)
	if err != nil {
		return raft.Snapshot{}, 0, err
	}
	dataLen, err := h.dataBytes(int64(size))
	if err != nil {
		return raft.Snapshot{}, 0, err
	}
	metaLen, trailer := uint64(h.metaLen), uint64(h.trailerBytes())
	if h.version == 2 {
		// The trailer's length field must name the data the file's size
		// leaves (dataBytes).
		if stored := binary.LittleEndian.Uint64(data[size-trailerSizeV2:]); stored != uint64(dataLen) {
			return raft.Snapshot{}, 0, fmt.Errorf("%w: truncated or padded: %d bytes, the file says %d of metadata and %d of data",
				ErrCorrupt, size, metaLen, stored)
		}
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
		snap.Data = data[headerSize+metaLen : size-trailer]
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
