package snapshot

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"sync"

	"coord/raft"
	"coord/storage/vfs"
)

// Source is a snapshot file's data, read as a stream: it implements
// raft.SnapshotSource, so that a snapshot of any size passes through the
// node and the transport without being held in memory. Every Open reads
// the file again and verifies it as it goes: the header, the data's
// length, and at the end the checksum, against the file's own trailer and
// against the checksum the Source was made with (the one the log
// records). A damaged file makes the reader return an error wrapping
// ErrCorrupt, at the latest with the data's last bytes, so a consumer
// that reads all the data (or to io.EOF) has read what the checksum
// vouches for.
//
// A Source is safe for concurrent use; each reader is not. The file's
// path may change (a spooled file being adopted) through SetPath.
type Source struct {
	fsys vfs.FS
	size int64
	sum  uint32

	path pathBox
}

var _ raft.SnapshotSource = (*Source)(nil)

// NewSource returns the Source of the snapshot file at path, whose data is
// size bytes long and whose checksum is sum (as Writer.Size and
// Writer.Commit or Seal returned them, or as Read found).
func NewSource(fsys vfs.FS, path string, size int64, sum uint32) *Source {
	s := &Source{fsys: fsys, size: size, sum: sum}
	s.path.set(path)
	return s
}

// Size implements raft.SnapshotSource.
func (s *Source) Size() int64 { return s.size }

// Checksum returns the file's checksum.
func (s *Source) Checksum() uint32 { return s.sum }

// Path returns the file's path.
func (s *Source) Path() string { return s.path.get() }

// SetPath records that the file was renamed to path.
func (s *Source) SetPath(path string) { s.path.set(path) }

// Open implements raft.SnapshotSource: it opens the file, checks its
// header, and returns a reader of its data.
func (s *Source) Open() (io.ReadCloser, error) {
	path := s.path.get()
	f, err := s.fsys.Open(path)
	if err != nil {
		return nil, fmt.Errorf("snapshot: open %s: %w", path, err)
	}
	r := &sourceReader{f: f, path: path, want: s.sum, crc: crc32.New(castagnoli)}
	if err := r.readHead(s.size); err != nil {
		f.Close()
		return nil, fmt.Errorf("snapshot %s: %w", path, err)
	}
	return r, nil
}

// sourceReader reads a snapshot file's data and checks the file's
// checksum at the end.
type sourceReader struct {
	f       vfs.File
	path    string
	version uint32
	want    uint32
	crc     hash.Hash32
	left    int64 // data bytes not yet read
	size    int64
	err     error // sticky: the first error, or io.EOF once verified
}

// readHead reads and checks the header and metadata, and sets up the data
// of size bytes that follows.
func (r *sourceReader) readHead(size int64) error {
	h, head, err := readHeader(r.f)
	if err != nil {
		return err
	}
	r.version = h.version
	if h.version == 1 && h.dataLen != uint64(size) {
		return fmt.Errorf("%w: the header says %d bytes of data, want %d", ErrCorrupt, h.dataLen, size)
	}
	r.crc.Write(head)
	meta := make([]byte, h.metaLen)
	if _, err := io.ReadFull(r.f, meta); err != nil {
		return fmt.Errorf("%w: reading the metadata: %w", ErrCorrupt, err)
	}
	r.crc.Write(meta)
	if _, err := decodeMetadata(meta); err != nil {
		return err
	}
	r.left, r.size = size, size
	return nil
}

func (r *sourceReader) Read(p []byte) (int, error) {
	if r.err != nil {
		return 0, r.err
	}
	if r.left == 0 {
		r.err = r.verify()
		return 0, r.err
	}
	if int64(len(p)) > r.left {
		p = p[:r.left]
	}
	n, err := r.f.Read(p)
	r.crc.Write(p[:n])
	r.left -= int64(n)
	if r.left == 0 {
		// Verified with the last bytes, so that a consumer that stops
		// at the data's end (it knows the size) still learns of damage
		// before it acts on them.
		r.err = r.verify()
		if r.err != io.EOF {
			// Withheld with the error: io.ReadFull, say, drops an error
			// that comes with the bytes it asked for.
			return 0, r.err
		}
		return n, nil
	}
	switch {
	case errors.Is(err, io.EOF) && r.left > 0:
		r.err = fmt.Errorf("snapshot %s: %w: truncated: the data ends after %d of %d bytes", r.path, ErrCorrupt, r.size-r.left, r.size)
		return n, r.err
	case err != nil && !errors.Is(err, io.EOF):
		r.err = fmt.Errorf("snapshot %s: read: %w", r.path, err)
		return n, r.err
	}
	return n, nil
}

// verify reads the trailer after the data and checks the checksum, and
// that nothing follows; it returns io.EOF if all is well.
func (r *sourceReader) verify() error {
	trailer := make([]byte, trailerSizeV2)
	if r.version == 1 {
		trailer = trailer[:trailerSize]
	}
	if _, err := io.ReadFull(r.f, trailer); err != nil {
		return fmt.Errorf("snapshot %s: %w: reading the trailer: %w", r.path, ErrCorrupt, err)
	}
	sumAt := len(trailer) - trailerSize
	if r.version == 2 {
		if n := binary.LittleEndian.Uint64(trailer); n != uint64(r.size) {
			return fmt.Errorf("snapshot %s: %w: the trailer says %d bytes of data, want %d", r.path, ErrCorrupt, n, r.size)
		}
	}
	r.crc.Write(trailer[:sumAt])
	got, stored := r.crc.Sum32(), binary.LittleEndian.Uint32(trailer[sumAt:])
	switch {
	case got != stored:
		return fmt.Errorf("snapshot %s: %w: checksum %#08x, want %#08x", r.path, ErrCorrupt, stored, got)
	case stored != r.want:
		return fmt.Errorf("snapshot %s: %w: checksum %#08x, the log says %#08x", r.path, ErrCorrupt, stored, r.want)
	}
	var extra [1]byte
	if n, _ := r.f.Read(extra[:]); n > 0 {
		return fmt.Errorf("snapshot %s: %w: bytes after the trailer", r.path, ErrCorrupt)
	}
	return io.EOF
}

func (r *sourceReader) Close() error { return r.f.Close() }

// pathBox is a path that one goroutine may change while others read it.
type pathBox struct {
	mu   sync.Mutex
	path string
}

func (b *pathBox) get() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.path
}

func (b *pathBox) set(path string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.path = path
}
