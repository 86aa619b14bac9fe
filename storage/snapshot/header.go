package snapshot

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// header is a snapshot file's fixed header (the first headerSize bytes;
// see the package doc), parsed and checked by parseHeader: Read, Stat and
// Source all go through it, so that a fault in the header gets one answer
// whichever of them meets it.
type header struct {
	version uint32
	// metaLen is the metadata's length, at most maxMetadataBytes.
	metaLen int64
	// dataLen is version 1's data length (bytes 16-23), checked against
	// the file's size, which only the caller knows, by dataBytes; 0 in
	// version 2, whose length is in the trailer.
	dataLen uint64
}

// maxMetadataIDs bounds each membership list a reader accepts: metadata is
// small, and its length comes from the file.
const maxMetadataIDs = 1 << 16

// maxMetadataBytes is the longest metadata a header may announce: index,
// term, and three lists of at most maxMetadataIDs IDs.
const maxMetadataBytes = 16 + 3*4 + 3*8*maxMetadataIDs

// trailerBytes returns the length of the trailer after the data.
func (h header) trailerBytes() int64 {
	if h.version == 1 {
		return trailerSize
	}
	return trailerSizeV2
}

// dataBytes returns the length of the data in a file of fileSize bytes
// whose header is h: version 1's length field, which must agree with the
// file's size; in version 2, what the size leaves between the metadata and
// the trailer (the trailer's own length field is checked against it by
// whoever reads the trailer: decode, or a Source at the data's end). A
// size that disagrees wraps ErrCorrupt. Read and Stat both size the data
// here.
func (h header) dataBytes(fileSize int64) (int64, error) {
	if h.version == 1 {
		// Compare without overflowing: dataLen comes from the file.
		if h.dataLen > uint64(fileSize) || headerSize+h.metaLen+int64(h.dataLen)+trailerSize != fileSize {
			return 0, fmt.Errorf("%w: truncated or padded: %d bytes, the file says %d of metadata and %d of data",
				ErrCorrupt, fileSize, h.metaLen, h.dataLen)
		}
		return int64(h.dataLen), nil
	}
	n := fileSize - headerSize - h.metaLen - trailerSizeV2
	if n < 0 {
		return 0, fmt.Errorf("%w: truncated: %d bytes, shorter than a header, %d of metadata and a trailer",
			ErrCorrupt, fileSize, h.metaLen)
	}
	return n, nil
}

// parseHeader parses and checks the header at the start of b. Every fault
// wraps ErrCorrupt, except a version past formatVersion, which wraps
// ErrUnsupported: a file shorter than a header, a bad magic number,
// version 0 (no build ever wrote it: zeroed or damaged bytes, not a newer
// format), a version 2 header whose bytes 16-23 are not zero, metadata
// longer than any membership could need.
func parseHeader(b []byte) (header, error) {
	if len(b) < headerSize {
		return header{}, fmt.Errorf("%w: truncated: %d bytes, shorter than a header", ErrCorrupt, len(b))
	}
	if string(b[:8]) != magic {
		return header{}, fmt.Errorf("%w: bad magic %q, want %q: not a coord snapshot", ErrCorrupt, b[:8], magic)
	}
	h := header{
		version: binary.LittleEndian.Uint32(b[8:]),
		metaLen: int64(binary.LittleEndian.Uint32(b[12:])),
		dataLen: binary.LittleEndian.Uint64(b[16:]),
	}
	switch {
	case h.version == 0:
		return header{}, fmt.Errorf("%w: format version 0", ErrCorrupt)
	case h.version > formatVersion:
		return header{}, fmt.Errorf("%w: format version %d, this build reads versions 1 to %d",
			ErrUnsupported, h.version, formatVersion)
	case h.version == 2 && h.dataLen != 0:
		return header{}, fmt.Errorf("%w: header bytes 16-23 are %#x, want 0", ErrCorrupt, h.dataLen)
	case h.metaLen > maxMetadataBytes:
		return header{}, fmt.Errorf("%w: metadata of %d bytes", ErrCorrupt, h.metaLen)
	}
	return h, nil
}

// readHeader reads the header from r and parses it (parseHeader). It
// returns the header's bytes too, for a checksum.
func readHeader(r io.Reader) (header, []byte, error) {
	b := make([]byte, headerSize)
	n, err := io.ReadFull(r, b)
	switch {
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		return header{}, nil, fmt.Errorf("%w: truncated: %d bytes, shorter than a header", ErrCorrupt, n)
	case err != nil:
		return header{}, nil, fmt.Errorf("reading the header: %w", err)
	}
	h, err := parseHeader(b)
	return h, b, err
}
