// Package wal is coord's write-ahead log: the durable record of a Raft
// node's hard state and log entries, appended in batches and replayed on
// open.
//
// # Use
//
//	w, state, err := wal.Open(fsys, dir, wal.Options{})
//	// state holds the checkpoint, hard state and entries recovered.
//	err = w.Append(hs, entries) // one atomic batch, written but not durable
//	err = w.Sync()              // durable: now the messages that depend on it may go out
//
// Append writes one batch; Sync makes every batch appended so far durable
// (fsync). Nothing is durable before Sync returns nil, and after a crash a
// batch is recovered whole or not at all. A WAL whose write or sync failed
// refuses all further work (ErrFailed) until Repair, or a reopen, succeeds:
// the state of the file after a failed write or fsync is unknowable (after
// a failed fsync the page cache may show bytes the disk never got), so
// retrying the write in place is never safe. Repair takes the log back to
// its last successful Sync (or Checkpoint): it removes the segments started
// since, truncates the last segment to the size that Sync left and syncs
// it. The batches appended since were never acknowledged, and the caller
// writes them again. That is how a full disk is survived: writes fail with
// ENOSPC, Repair fails or the next write does, until space returns.
//
// Checkpoint starts a new segment holding a snapshot marker, the hard state
// and the entries after the snapshot, makes it durable, then removes all
// older segments: that is how the log sheds what a snapshot replaced. The
// removal runs off the caller's goroutine (Options.Background), since
// unlinking a 64 MiB segment took longer than writing the checkpoint
// (issue 21): once the checkpoint is durable the old segments are no
// longer read, and a crash before they are gone leaves them to Open.
//
// # Directory
//
// A WAL owns one directory of segment files named by a sequence number in
// 16 hex digits, "0000000000000001.wal", "0000000000000002.wal", ... Other
// files are ignored. Appends go to the last segment; a batch that would take
// it past Options.SegmentBytes goes to a new one (a batch never spans two
// segments, so one larger than the bound makes a larger segment). A new
// segment is created durably: allocated, written, fsynced, then its
// directory fsynced, before any batch in it is acknowledged. Only then does the segment before
// it get its last record, an end-of-segment record naming the new one, and
// a sync. So a lost newest segment is seen as a loss (the segment before
// it names it: ErrCorrupt), never taken for the end of the log, and a crash
// in the middle of the roll leaves a new segment with no batch, which Open
// removes, and a segment before it whose tail is torn at worst.
//
// Segments are preallocated: a segment's space is allocated ahead of its
// records (vfs.WriteAtFile.Allocate, fallocate(2) on Linux), in steps of
// Options.PreallocateBytes up to Options.SegmentBytes, and each batch is
// written at its offset inside it. Sync is then fdatasync, and since the
// file's size did not change the file system has no size to journal: on
// ext4 a write and sync took 0.75 to 0.79 of the time on a growing file
// (BenchmarkAppendSync, docs/BENCHMARKS.md). A step,
// not the whole segment at once, because Open reads the last segment whole,
// zero tail included. After the last complete batch, a segment holds zeros
// up to its allocated length. A disk too full for a step is no error: the
// write goes on without one, and meets the full disk itself if it must.
//
// Options.RequireExisting makes Open fail with ErrMissing where it would
// otherwise start a new log in an empty directory: a node that has voted
// must never come back with an empty log.
//
// # Segment format (version 1)
//
// All integers are little-endian. CRCs are CRC-32C (Castagnoli).
//
//	segment header, 32 bytes:
//	  0  8  magic "coordWAL"
//	  8  4  format version, 1
//	 12  4  zero
//	 16  8  sequence number, equal to the one in the file name
//	 24  4  CRC of bytes 0..24
//	 28  4  zero
//
//	then records, back to back, and then zeros up to the allocated length:
//	  0  4  payload length n (at most MaxRecordBytes)
//	  4  1  record type
//	  5  1  flags: bit 0 marks the last record of a batch; others zero
//	  6  2  zero
//	  8  4  header CRC: of bytes 0..8, then the segment's sequence number
//	        and this record's offset in the segment (8 bytes each)
//	 12  4  payload CRC: of the n payload bytes
//	 16  n  payload
//
// Seeding the header CRC with the record's position means a record is valid
// only where it was written: a copy of one inside an entry's data, or in a
// stale page, does not pass for a record.
//
// Record types and payloads:
//
//	1 entry       term (8), index (8), entry type (1), data (n-17)
//	2 hard state  term (8), vote (8), commit (8)
//	3 checkpoint  snapshot index (8), snapshot term (8), snapshot checksum (4)
//	4 segment end the next segment's sequence number (8); a batch of its
//	              own, the segment's last record
//
// # Replay
//
// Batches apply in order. An entry at index i drops every entry from i on,
// then appends (Raft's conflict truncation, §5.3); i must be at most one past
// the last index and above the checkpoint's index. A hard state record
// replaces the hard state. A checkpoint record may only open a segment; it
// resets the log to "everything up to the snapshot index is in the
// snapshot", and the entries after it follow in the same batch. Replay starts
// at the newest segment that opens with a checkpoint (or at segment 1);
// older segments are leftovers of a checkpoint interrupted before it removed
// them, and are removed. A segment-end record only checks the sequence: it
// must be its segment's last record and name the next segment, which must
// exist.
//
// # Recovery
//
// Zeros from the end of the last complete batch to the end of the last
// segment are allocated space that no write reached: the end of the log, not
// a tear. No record has type 0, so zeros never pass for a record (whatever
// the position-seeded checksum of zeros happens to be). In an earlier
// segment, zeros may only follow the end-of-segment record.
//
// A crash can leave the end of the last segment torn: a prefix of the
// unsynced writes, possibly followed by zeros (a size that reached the disk
// before the data, or allocated space). Open truncates such a tail, back to
// the end of the last complete batch, and logs it; an incomplete batch
// followed by zeros is such a tail. Truncating, not writing over: a shorter
// batch written over a torn one would leave the torn one's later records,
// valid where they lie, after it. A bad record is taken for a torn tail only
// in the last segment and only if no valid record (checked at every byte
// offset after it, up to the zero tail) follows; anything else — a bad
// record or zeros in an earlier segment before its end-of-segment record, a
// bad record followed by a valid one, a segment missing from the sequence, a
// bad magic number, a batch cut short at the end of an earlier segment — is
// corruption, reported as an error wrapping ErrCorrupt and never skipped.
// Where the bytes a crash kept from being written were zeros anyway (the
// last bytes of a hard state record often are), the allocated zeros
// complete the batch: it is recovered, and it is the batch written. A record or segment written by a
// newer format (unknown version, record type or flag) is an error wrapping
// ErrUnsupported.
//
// The torn-tail rule assumes, as the crash model of vfs.MemFS does, that a
// crash persists a prefix of a file's unsynced writes. A device that
// persisted a later page of an unsynced write but not an earlier one would
// make Open report ErrCorrupt for data that was never acknowledged; that
// errs on the side of stopping rather than silently dropping.
//
// A WAL is not safe for concurrent use.
package wal
