package snapshot

import (
	"fmt"
	"io"
	"path/filepath"

	"coord/raft"
	"coord/storage/vfs"
)

// Stat reads the header and metadata of the snapshot file at path, and
// the file's size, without reading its data: it returns the metadata and
// the data's length, for a Source (NewSource) whose reader verifies the
// data and the checksum as it goes. A file whose header, metadata, name or
// size is wrong is an error wrapping ErrCorrupt (a newer version,
// ErrUnsupported); damage inside the data, or a file replaced by another
// of the same size, shows only when the data is read. That is how a node
// that restarts reads its snapshot once: at its restore, which fails on a
// damaged file.
func Stat(fsys vfs.FS, path string) (raft.SnapshotMetadata, int64, error) {
	f, err := fsys.Open(path)
	if err != nil {
		return raft.SnapshotMetadata{}, 0, fmt.Errorf("snapshot: %w", err)
	}
	defer f.Close()
	meta, size, err := stat(f)
	if err != nil {
		return raft.SnapshotMetadata{}, 0, fmt.Errorf("snapshot %s: %w", path, err)
	}
	if index, term, ok := ParseFileName(filepath.Base(path)); ok && (index != meta.Index || term != meta.Term) {
		return raft.SnapshotMetadata{}, 0, fmt.Errorf("snapshot %s: %w: file holds index %d term %d",
			path, ErrCorrupt, meta.Index, meta.Term)
	}
	return meta, size, nil
}

func stat(f vfs.File) (raft.SnapshotMetadata, int64, error) {
	fileSize, err := vfs.FileSize(f)
	if err != nil {
		return raft.SnapshotMetadata{}, 0, err
	}
	h, _, err := readHeader(f)
	if err != nil {
		return raft.SnapshotMetadata{}, 0, err
	}
	size, err := h.dataBytes(fileSize)
	if err != nil {
		return raft.SnapshotMetadata{}, 0, err
	}
	p := make([]byte, h.metaLen)
	if _, err := io.ReadFull(f, p); err != nil {
		return raft.SnapshotMetadata{}, 0, fmt.Errorf("%w: truncated: reading the metadata: %w", ErrCorrupt, err)
	}
	meta, err := decodeMetadata(p)
	return meta, size, err
}
