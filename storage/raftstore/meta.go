package raftstore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"path/filepath"
	"time"

	"coord/storage/vfs"
)

// Identity names the node a data directory belongs to. It is written once,
// when the node is created (bootstrap or join), and never changes: a
// directory that has one must hold a log, and only the node it names may
// run on it.
type Identity struct {
	// ClusterID names the cluster; 0 means not known when the node was
	// created (a node that joined without being told).
	ClusterID uint64
	// NodeID is the node's Raft ID; never 0.
	NodeID uint64
	// Created is when the directory was created.
	Created time.Time
}

// String describes the identity for error messages and logs.
func (id Identity) String() string {
	return fmt.Sprintf("node %d of cluster %016x, created %s", id.NodeID, id.ClusterID, id.Created.UTC().Format(time.RFC3339))
}

// File names in the data directory.
const (
	identityFile = "IDENTITY"
	voteFile     = "VOTE"
	tmpSuffix    = ".tmp"
)

// The IDENTITY record: a magic, a format version, the fields, and a
// CRC-32C of everything before it. All integers are little-endian.
//
//	IDENTITY, 48 bytes: "coordID\x00", version 1 (4), zero (4), cluster id
//	(8), node id (8), created in Unix nanoseconds (8), CRC (4), zero (4)
//
// The VOTE file's formats are in vote.go.
const (
	identityMagic = "coordID\x00"
	metaVersion   = 1
	identitySize  = 48
)

func encodeIdentity(id Identity) []byte {
	b := make([]byte, 0, identitySize)
	b = append(b, identityMagic...)
	b = binary.LittleEndian.AppendUint32(b, metaVersion)
	b = binary.LittleEndian.AppendUint32(b, 0)
	b = binary.LittleEndian.AppendUint64(b, id.ClusterID)
	b = binary.LittleEndian.AppendUint64(b, id.NodeID)
	b = binary.LittleEndian.AppendUint64(b, uint64(id.Created.UnixNano()))
	b = binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
	return binary.LittleEndian.AppendUint32(b, 0)
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// checkRecord validates the frame of a record of size bytes with magic;
// errors wrap ErrCorrupt.
func checkRecord(data []byte, magic string, size int, version uint32) error {
	switch {
	case len(data) != size:
		return fmt.Errorf("%w: %d bytes, want %d", ErrCorrupt, len(data), size)
	case !bytes.Equal(data[:8], []byte(magic)):
		return fmt.Errorf("%w: bad magic %q, want %q", ErrCorrupt, data[:8], magic)
	case binary.LittleEndian.Uint32(data[8:]) != version:
		return fmt.Errorf("%w: format version %d, want %d", ErrCorrupt, binary.LittleEndian.Uint32(data[8:]), version)
	}
	if got, want := binary.LittleEndian.Uint32(data[size-8:]), crc32.Checksum(data[:size-8], castagnoli); got != want {
		return fmt.Errorf("%w: checksum %#08x, want %#08x", ErrCorrupt, got, want)
	}
	// The last 4 bytes, after the CRC, are always written zero: anything
	// else is damage the CRC does not cover.
	if pad := binary.LittleEndian.Uint32(data[size-4:]); pad != 0 {
		return fmt.Errorf("%w: bytes after the checksum are %#08x, want 0", ErrCorrupt, pad)
	}
	return nil
}

// readIdentity reads dir's IDENTITY; ok is false if there is none.
func readIdentity(fsys vfs.FS, dir string) (id Identity, ok bool, err error) {
	name := filepath.Join(dir, identityFile)
	data, err := vfs.ReadFile(fsys, name)
	if errors.Is(err, fs.ErrNotExist) {
		return Identity{}, false, nil
	}
	if err != nil {
		return Identity{}, false, err
	}
	if err := checkRecord(data, identityMagic, identitySize, metaVersion); err != nil {
		return Identity{}, false, fmt.Errorf("%s: %w", name, err)
	}
	id = Identity{
		ClusterID: binary.LittleEndian.Uint64(data[16:]),
		NodeID:    binary.LittleEndian.Uint64(data[24:]),
		Created:   time.Unix(0, int64(binary.LittleEndian.Uint64(data[32:]))),
	}
	if id.NodeID == 0 {
		return Identity{}, false, fmt.Errorf("%s: %w: node id 0", name, ErrCorrupt)
	}
	return id, true, nil
}

// writeAtomic replaces dir/name with data durably: write a temporary
// file, fsync it, rename it over name, fsync dir.
func writeAtomic(fsys vfs.FS, dir, name string, data []byte) error {
	final := filepath.Join(dir, name)
	tmp := final + tmpSuffix
	f, err := fsys.Create(tmp)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if err = errors.Join(err, f.Close()); err != nil {
		_ = fsys.Remove(tmp) // best effort; the next write replaces it
		return fmt.Errorf("write %s: %w", tmp, err)
	}
	if err := fsys.Rename(tmp, final); err != nil {
		return fmt.Errorf("rename %s: %w", tmp, err)
	}
	return fsys.SyncDir(dir)
}
