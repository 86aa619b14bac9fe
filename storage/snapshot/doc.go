// Package snapshot stores Raft snapshots (the application's state machine as
// of a log index, with the membership at that index) in checksummed files
// that are replaced atomically.
//
// # Write protocol
//
// Write (or Create, then Writer.Write for each piece of the data, then
// Writer.Commit) creates "<name>.tmp", writes the whole snapshot, fsyncs it,
// renames it to "<name>", then fsyncs the directory. A crash at any step leaves
// either no file under the final name or the complete snapshot: never a
// partial one. A leftover ".tmp" file is garbage; List reports it and the
// owner of the directory removes it.
//
// # File format (version 2)
//
// The file for a snapshot at index i and term t is named
// "%016x-%016x.snap" (i, t). All integers are little-endian.
//
//	0   8  magic "coordSNP"
//	8   4  format version, 2
//	12  4  metadata length m
//	16  8  zero (version 1 kept the data's length here)
//	24  m  metadata: index (8), term (8), then three lists of node IDs
//	       (voters, learners, outgoing voters), each a count (4) and
//	       that many IDs (8 each)
//	24+m n  the application's data
//	end-12 8  data length n
//	end-4  4  CRC-32C (Castagnoli) of every byte before it
//
// The data's length follows the data so that a snapshot can be streamed
// to the file as the state machine encodes it, without knowing its size
// first or holding it in memory. Version 1 files (the length n at offset
// 16, only the checksum after the data) are still read.
//
// Read verifies the checksum and every length before returning anything: a
// truncated file, a flipped bit, a bad magic number or a name that does not
// match the metadata is an error wrapping ErrCorrupt; a newer version,
// ErrUnsupported (version 0, which no build wrote, is damage: ErrCorrupt).
// Read, Stat and Source parse the header with one function, so a fault
// in it gets the same answer from each. The checksum also identifies the
// file: the write-ahead log records it next to the snapshot's index so
// that a reopened node knows the file it finds is the one the log refers
// to. Stat checks only the header,
// metadata, name and size, and a Source verifies the data and checksum as
// it streams them: that is how a restarting node reads its snapshot once.
package snapshot
