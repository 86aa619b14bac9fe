// Package raftstore is the durable storage of a Raft node: a raft.Storage
// for the consensus core to read, with the write side the node shell needs,
// built on the write-ahead log (storage/wal) and snapshot files
// (storage/snapshot), all through a vfs.FS.
//
// # Use
//
//	disk, err := raftstore.Open(vfs.OS, dir, raftstore.Options{})
//	...
//	rd := core.Ready()
//	if !rd.Snapshot.IsEmpty() {
//		err = disk.ApplySnapshot(rd.Snapshot) // durable on return
//	}
//	err = disk.Save(rd.HardState, rd.Entries, rd.MustSync) // durable on return if MustSync
//	send(rd.Messages)                         // only now: they may depend on it
//	core.Advance(rd)
//	...
//	err = disk.Compact(appliedIndex, stateMachineSnapshot, confState)
//
// # Durability
//
// Save, ApplySnapshot and Compact return only once what they wrote is on
// stable storage (fsync of the log segment, and of the directory where a
// file was created or renamed). A nil return is the acknowledgment: the node
// may then send the messages that depend on it (a vote, an append
// response). After a crash, every acknowledged write is recovered, and each
// call is recovered whole or not at all. Reads (Entries, Term, ...) only
// ever show acknowledged writes.
//
// One exception, asked for by the caller: a Save without sync that changes
// only the commit index (a Ready whose MustSync is false) is written but
// not synced, so a crash may lose it, and recovery then finds the hard
// state of an earlier Save; the next synced write makes it durable. The
// commit index is not promised to anyone (a leader tells it again), while
// a term, a vote or an entry is: those are synced whatever the caller
// asks. This saves the second fsync of each write on the leader, whose
// commit-only Ready follows the one that appended (etcd's WAL does the
// same, raft.MustSync).
//
// A write that fails leaves the Disk refusing further writes if the
// write-ahead log may be in an unknown state (a failed fsync cannot be
// retried in place safely), until Repair succeeds: it takes the log back to
// the last acknowledged write (see wal.WAL.Repair), and the caller writes
// again what was not acknowledged. A full disk (ENOSPC, vfs.IsNoSpace) is
// survived that way, without a restart: writes fail, Repair and retries go
// on until space returns. Closing the Disk and opening the directory again
// recovers too. A failed snapshot write (Compact, ApplySnapshot) changes
// nothing and leaves the Disk usable unless the log's checkpoint failed.
//
// The term and vote are written to the VOTE file, durably, before the log
// record that carries them: a log that loses its tail (a torn or damaged
// last segment truncated by recovery) does not take the node's vote with
// it. Open takes the newer of the two. So after a crash the term and vote
// may be those of a Save that was not acknowledged; that is safe, a node
// may always move on to a newer term, and the vote was promised to no one
// else.
//
// The VOTE file is written in place, into the older of two checksummed
// slots, and made durable by one fdatasync (format in vote.go): a torn
// write leaves the other slot, so the file reads as before the write. A
// Save of a term and vote alone (no entries) is then durable once the
// VOTE file is: the slot holds its commit index too, and its log record is
// written but not synced, since Open takes the term and vote from the VOTE
// file where they are newer, and its commit index where it is higher than
// the log's (it is one the log held durably, and committed entries are
// never truncated), unless a Repair lost the log's records since its last
// sync, in which case the log is synced too.
// The record becomes durable with the next synced write. So an election
// costs one fsync on the candidate and on each voter, not three.
//
// A new node's first VOTE file is written before its log holds anything
// durable, and says so (a flag, cleared once the log's first sync
// succeeded): a crash between the two leaves an empty log beside a VOTE
// file, which Open accepts only while the flag is set; later, an empty log
// beside a VOTE file is a lost log (ErrLost).
//
// # On disk
//
//	dir/wal/     segments of the write-ahead log (format: package wal)
//	dir/snap/    the current snapshot file (format: package snapshot)
//	dir/LOCK     locked (vfs.FS.Lock) while a Disk has the directory open
//	dir/IDENTITY whose directory it is (SetIdentity): cluster and node id,
//	             creation time; written once
//	dir/VOTE     the newest term and the vote in it
//
// IDENTITY is a small checksummed record (format in meta.go), replaced
// atomically (tmp, fsync, rename, fsync dir). VOTE holds two such records
// (format in vote.go), written in place; its first write, and the first
// over the one-record file of earlier builds, creates it atomically.
//
// # Lost files
//
// Open starts a new log only in a directory with no IDENTITY, no VOTE and
// no snapshot: there, an empty directory is a new node. Anywhere else a
// missing write-ahead log, an empty one where VOTE records a vote, or a
// missing VOTE where the log has a term, is ErrLost; a snapshot the log
// refers to but cannot find, or a newest segment that the one before it
// names but is gone, is ErrCorrupt. The error names what is missing, and
// Open removes nothing: such a node must not run, for it would have
// forgotten votes and entries it acknowledged. The files are left for the
// operator, and the node replaced (remove it from the cluster, add it back
// with a new ID and an empty directory).
//
// ApplySnapshot and Compact follow one protocol: write the snapshot file
// atomically (tmp, fsync, rename, fsync dir); then start a log segment that
// opens with a checkpoint naming the snapshot (index, term, checksum),
// followed by the hard state and the entries kept after the snapshot, and
// fsync it and the directory; then rename the older snapshot files
// (<name>.retired.tmp) and remove them, and the older segments, in the
// background (Options.Background). A crash
// between the steps leaves either the old state (the new snapshot file is
// unreferenced, and Open removes it, with any leftover tmp file) or the
// new one (Open removes what the checkpoint replaced).
//
// Compact rewrites the entries kept after the snapshot into the new
// segment, so compacting near the last index keeps that cheap.
//
// A snapshot taken in the background splits that protocol in two:
// WriteSnapshot streams the file (tmp, fsync, rename, fsync dir) from any
// goroutine without holding the Disk's lock, so Save goes on meanwhile;
// CompactTo, on the node's goroutine, then writes the checkpoint. Until
// then the file is unreferenced (a crash leaves the old state, and Open
// removes the file), and an ApplySnapshot in between leaves it alone and
// makes CompactTo refuse it (see background.go).
//
// A snapshot received from a leader splits it the other way (receive.go):
// ReceiveSnapshot spools the data to dir/snap/recv-N.tmp as it arrives
// (header, data, trailer, fsync), from the transport's goroutine; then
// ApplySnapshot, handed that file's Source, renames it to its final name,
// fsyncs the directory and writes the checkpoint, copying nothing. Until
// the checkpoint the file is unreferenced, and a crash leaves the old
// state.
//
// All entries after the snapshot are held in memory (as with etcd's
// MemoryStorage beside its WAL). The snapshot's data is not: Snapshot
// returns a snapshot.Source that streams it from the file, checking its
// checksum, whenever it is opened (the first call after Open excepted,
// which returns the data Open read to verify the file).
//
// # Testing with crashes
//
// Open the Disk on a vfs.MemFS (one per simulated node). To crash a node,
// abandon its Disk without Close, call Crash or CrashTorn on the MemFS, and
// Open the directory again.
package raftstore
