package raftstore

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"coord/internal/assert"
	"coord/raft"
	"coord/storage/snapshot"
	"coord/storage/vfs"
	"coord/storage/wal"
)

// Errors.
var (
	// ErrCorrupt is wrapped, besides the underlying error, by every Open
	// error that means damaged files: a corrupt log or snapshot, or a log
	// whose snapshot is missing or does not match.
	ErrCorrupt = errors.New("raftstore: corrupt")
	// ErrClosed is returned by every method after Close.
	ErrClosed = errors.New("raftstore: closed")
	// ErrLost is wrapped by every Open error that means files this
	// directory must hold are gone: the log of a directory with an
	// IDENTITY (or a VOTE, or snapshots) is missing or empty, or the VOTE
	// of a node that has voted is. A node must not run on such a
	// directory: it would have forgotten its votes and acknowledged
	// entries. Every write of an open Disk wraps it too once the directory
	// was found removed or replaced under it (Options.CheckDirEvery).
	ErrLost = errors.New("raftstore: data lost")
	// ErrIdentity means SetIdentity was given another identity than the
	// one the directory has.
	ErrIdentity = errors.New("raftstore: the data directory belongs to another node")
)

// Options configures a Disk. The zero value is valid and means the defaults.
type Options struct {
	// SegmentBytes bounds the write-ahead log's segments (see wal.Options).
	// 0 means wal.DefaultSegmentBytes.
	SegmentBytes int64
	// Logger receives recovery notices. nil means slog.Default().
	Logger *slog.Logger
	// Background runs the removal of what a snapshot's checkpoint
	// replaced, the log segments (see wal.Options.Background) and the
	// older snapshot files, off the goroutine that installed it (the
	// node's loop): unlinking a snapshot of a large state and syncing the
	// directory took 59-121 ms at 500,000 keys (130 MB). It may run work on any
	// goroutine, at any later time, or never: work touches only files the
	// Disk no longer uses, and Open removes any that are left. nil means
	// a goroutine of its own, which Close waits for.
	Background func(work func())
	// CheckDirEvery is how often, at most, a Save first checks that the
	// directory is still the one Open locked: that its LOCK file is still
	// there, the very file Open locked. A directory removed (or removed
	// and made again) under a running node leaves its open files
	// writable, unlinked: without the check the node would go on
	// acknowledging entries that no restart can find. Once the check fails, every Save and Repair fails with
	// ErrLost until Close: the node stops acknowledging and voting, as on a
	// failed disk, and must be restarted on a directory that holds its
	// state. A Save that writes a term or vote always checks. 0 means
	// never: the check reads the file system, and a simulation's must see
	// the same calls in every run of a seed.
	CheckDirEvery time.Duration
}

// Validate reports an option out of range, naming the field.
func (o Options) Validate() error {
	if err := (wal.Options{SegmentBytes: o.SegmentBytes}).Validate(); err != nil {
		return fmt.Errorf("raftstore: Options.SegmentBytes: %w", err)
	}
	if o.CheckDirEvery < 0 {
		return fmt.Errorf("raftstore: Options.CheckDirEvery is %v, want 0 (never) or more", o.CheckDirEvery)
	}
	return nil
}

// Disk is a durable raft.Storage. Disk is safe for concurrent use, though
// the node shell calls it from one goroutine.
type Disk struct {
	mu      sync.Mutex
	fs      vfs.FS
	dir     string
	snapDir string
	logger  *slog.Logger
	wal     *wal.WAL
	lock    io.Closer // the directory's LOCK file, held while open

	// identity is nil until one is written. It is written once, so
	// Identity reads it without the lock, never waiting behind a Save's
	// fsync (a node's status and every forwarded request ask for it).
	identity atomic.Pointer[Identity]
	// voteFile is what the VOTE file holds (zero: no file), and where.
	voteFile voteFileState
	hs       raft.HardState
	// logDurable says the log holds something durable (a hard state, an
	// entry or a checkpoint), synced by this Disk or found at Open.
	logDurable bool
	// hsRewrite says a Repair took the log back to its last sync, which
	// may lack hs (a commit index saved without sync): the next Save
	// writes it again.
	hsRewrite bool
	snapMeta  raft.SnapshotMetadata // Index 0: no snapshot
	snapSum   uint32                // checksum of the snapshot file
	snapSize  int64                 // length of the snapshot file's data
	ents      []raft.Entry          // after snapMeta.Index, contiguous
	// pending holds the snapshot files WriteSnapshot is writing or has
	// written, by name, until CompactTo (background.go).
	pending map[string]pendingSnapshot
	// received holds the snapshots received from a leader (ReceiveSnapshot)
	// being spooled, or spooled and waiting for ApplySnapshot, by the
	// name of their temporary file (receive.go).
	received map[string]*receivedSnapshot
	spools   uint64 // received snapshots so far, to name their files

	// background runs the removal of retired snapshot files
	// (Options.Background); removals counts those running on goroutines
	// of their own (Options.Background nil), which Close waits for.
	background func(work func())
	removals   sync.WaitGroup

	// checkDirEvery is Options.CheckDirEvery; dirChecked is when Save last
	// found the LOCK file; gone is the error every Save and Repair returns
	// once it did not.
	checkDirEvery time.Duration
	dirChecked    time.Time
	gone          error

	closed bool
}

var _ raft.Storage = (*Disk)(nil)

// Open opens the storage in dir, creating it if needed, and recovers its
// state: the write-ahead log is replayed (a torn tail is truncated and
// logged), the term and vote are taken from the VOTE file where it is
// newer, and the header, metadata and size of the snapshot the log refers
// to are checked (its data and checksum are verified as the data is read:
// Snapshot's Source fails with ErrCorrupt on a damaged file, so a node
// restores from it once, and fails its restore). Leftover files
// from an interrupted write are removed. A new log is started only in a
// directory that holds no IDENTITY, VOTE or snapshot file: otherwise a
// missing log is an error wrapping ErrLost, and nothing is removed. An
// error wrapping ErrCorrupt means the files are damaged; with ErrLost, that
// some are missing. Either way the node must not run on them.
func Open(fsys vfs.FS, dir string, opts Options) (*Disk, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.Default()
	}
	d := &Disk{fs: fsys, dir: dir, snapDir: filepath.Join(dir, "snap"), logger: logger, background: opts.Background,
		checkDirEvery: opts.CheckDirEvery}
	// Two processes appending to one log would interleave their records:
	// the directory is locked for as long as the Disk is open.
	if err := vfs.MkdirAllDurable(fsys, dir); err != nil {
		return nil, fmt.Errorf("raftstore: open %s: %w", dir, err)
	}
	lock, err := fsys.Lock(filepath.Join(dir, "LOCK"))
	if err != nil {
		return nil, fmt.Errorf("raftstore: open %s: %w (is another node using this directory?)", dir, err)
	}
	d.lock = lock
	if err := d.recover(dir, opts); err != nil {
		if d.wal != nil {
			_ = d.wal.Close() // the recovery error is the one to report
		}
		_ = lock.Close()
		if errors.Is(err, wal.ErrCorrupt) || errors.Is(err, snapshot.ErrCorrupt) {
			err = fmt.Errorf("%w: %w", ErrCorrupt, err)
		}
		return nil, fmt.Errorf("raftstore: open %s: %w", dir, err)
	}
	return d, nil
}

func (d *Disk) recover(dir string, opts Options) error {
	id, hasID, err := readIdentity(d.fs, dir)
	if err != nil {
		return err
	}
	if hasID {
		d.identity.Store(&id)
	}
	vf, hasVote, err := readVote(d.fs, dir)
	if err != nil {
		return err
	}
	if vf.damaged != nil {
		d.logger.Warn("raftstore: a slot of the VOTE file holds no valid record: a write torn by a crash (its vote was never acknowledged), or damage to the newest vote; the other slot's vote is used",
			"file", filepath.Join(dir, voteFile), "term", vf.vote.term, "vote", vf.vote.vote, "err", vf.damaged)
	}
	d.voteFile = vf
	w, state, err := d.openLog(dir, opts, hasVote)
	if err != nil {
		return err
	}
	d.wal, d.hs, d.ents = w, state.HardState, state.Entries
	d.logDurable = !state.HardState.IsEmpty() || len(state.Entries) > 0 || state.Checkpoint.Index > 0
	if err := d.checkLog(state, hasVote); err != nil {
		return err
	}
	if err := vfs.MkdirAllDurable(d.fs, d.snapDir); err != nil {
		return err
	}
	keep := ""
	if cp := state.Checkpoint; cp.Index > 0 {
		keep = snapshot.FileName(cp.Index, cp.Term)
		// Only the header, the metadata and the size are read here: the
		// data and the checksum (the file's own, and the one the
		// checkpoint records) are verified as the data is read, by the
		// Source Snapshot returns, so that a restart reads the file once,
		// at the node's restore, which fails on a damaged file.
		meta, size, err := snapshot.Stat(d.fs, filepath.Join(d.snapDir, keep))
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return fmt.Errorf("%w: the log's checkpoint at index %d term %d refers to snapshot %s, which is missing",
				ErrCorrupt, cp.Index, cp.Term, keep)
		case err != nil:
			return err
		}
		d.snapMeta, d.snapSum, d.snapSize = meta, cp.SnapshotChecksum, size
	}
	return d.removeSnapshotsExcept(keep)
}

// openLog opens the write-ahead log, starting a new one only where dir
// shows no sign of having had one.
func (d *Disk) openLog(dir string, opts Options, hasVote bool) (*wal.WAL, wal.State, error) {
	o := wal.Options{SegmentBytes: opts.SegmentBytes, Logger: d.logger, RequireExisting: true, Background: opts.Background}
	w, state, err := wal.Open(d.fs, filepath.Join(dir, "wal"), o)
	if !errors.Is(err, wal.ErrMissing) {
		return w, state, err
	}
	snaps, _, lerr := snapshot.List(d.fs, d.snapDir)
	switch {
	case lerr != nil:
		return nil, wal.State{}, lerr
	case d.identity.Load() != nil:
		return nil, wal.State{}, fmt.Errorf("%w: the write-ahead log %s is missing (%v), but %s says this directory belongs to %v",
			ErrLost, filepath.Join(dir, "wal"), err, identityFile, *d.identity.Load())
	case hasVote:
		return nil, wal.State{}, fmt.Errorf("%w: the write-ahead log %s is missing (%v), but %s says the node voted in term %d",
			ErrLost, filepath.Join(dir, "wal"), err, voteFile, d.voteFile.vote.term)
	case len(snaps) > 0:
		return nil, wal.State{}, fmt.Errorf("%w: the write-ahead log %s is missing (%v), but %s holds snapshot %s; it was not removed",
			ErrLost, filepath.Join(dir, "wal"), err, d.snapDir, snaps[len(snaps)-1].Name)
	}
	// A new node.
	o.RequireExisting = false
	return wal.Open(d.fs, filepath.Join(dir, "wal"), o)
}

// checkLog merges the VOTE file into the recovered hard state, and checks
// that a directory with an identity did not lose its log's contents.
func (d *Disk) checkLog(state wal.State, hasVote bool) error {
	empty := state.HardState.IsEmpty() && len(state.Entries) == 0 && state.Checkpoint.Index == 0
	id := d.identity.Load()
	switch {
	case id != nil && empty && d.voteFile.vote.term > 0 && d.voteFile.flags&voteBeforeLog == 0:
		return fmt.Errorf("%w: the write-ahead log is empty, but %s says the node voted in term %d (%v)",
			ErrLost, voteFile, d.voteFile.vote.term, *id)
	case id != nil && !hasVote && state.HardState.Term > 0:
		return fmt.Errorf("%w: %s is missing, but the log is at term %d (%v)",
			ErrLost, filepath.Join(d.dir, voteFile), state.HardState.Term, *id)
	}
	hs := state.HardState
	switch v := d.voteFile.vote; {
	case v.term > hs.Term:
		// The log does not have the record of the newest term: a
		// vote-only Save does not sync it (the VOTE file, written first,
		// has it), or a torn or damaged tail took it.
		d.logger.Info("raftstore: the log's hard state is older than the vote file; taking the vote file's term and vote",
			"dir", d.dir, "log_term", hs.Term, "log_vote", hs.Vote, "term", v.term, "vote", v.vote)
		hs.Term, hs.Vote = v.term, v.vote
	case v.term == hs.Term && hs.Vote == 0:
		hs.Vote = v.vote
	case v.term == hs.Term && v.vote != 0 && v.vote != hs.Vote:
		return fmt.Errorf("%w: in term %d the log says the vote went to %d, %s says to %d",
			ErrCorrupt, hs.Term, hs.Vote, voteFile, v.vote)
	}
	// The VOTE file's commit index was durable in the log when written,
	// and committed entries are never truncated: it is newer than the
	// log's when the log's record of a vote-only Save was not synced.
	last := state.Checkpoint.Index + uint64(len(state.Entries))
	switch c := d.voteFile.commit; {
	case c > last:
		// The log lost entries it had synced (a disk that lied): the
		// leader tells the node (raft.LogLost); the commit index must
		// not point past the log.
		d.logger.Warn("raftstore: the vote file's commit index is past the log's last index; ignoring it",
			"dir", d.dir, "commit", c, "last_index", last)
	case c > hs.Commit:
		hs.Commit = c
	}
	d.hs = hs
	return nil
}

// Identity returns the directory's identity, if one was written. It takes
// no lock: it never waits for a write in progress.
func (d *Disk) Identity() (Identity, bool) {
	id := d.identity.Load()
	if id == nil {
		return Identity{}, false
	}
	return *id, true
}

// SetIdentity records, durably, whose directory this is: from then on,
// Open refuses the directory if its log goes missing. Call it when the node
// is created, before it saves anything. It does nothing if the directory
// has this identity already (same cluster and node), and fails with
// ErrIdentity if it has another.
func (d *Disk) SetIdentity(id Identity) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.writable(); err != nil {
		return err
	}
	if id.NodeID == 0 {
		return fmt.Errorf("raftstore: set identity: node id 0")
	}
	if have := d.identity.Load(); have != nil {
		if have.ClusterID != id.ClusterID || have.NodeID != id.NodeID {
			return fmt.Errorf("%w: it is %v, not %v", ErrIdentity, *have, id)
		}
		return nil
	}
	if err := writeAtomic(d.fs, d.dir, identityFile, encodeIdentity(id)); err != nil {
		return fmt.Errorf("raftstore: set identity: %w", err)
	}
	d.identity.Store(&id)
	return nil
}

// Repair makes the Disk take writes again after a failed one left its
// log unusable (wal.ErrFailed), as wal.WAL.Repair does: the log goes back
// to the last acknowledged write, and the caller writes again what was
// not acknowledged. On error (the disk is still full, say) the Disk still
// refuses writes; call Repair again later. Reads are unaffected throughout:
// they only ever showed acknowledged writes.
func (d *Disk) Repair() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.writable(); err != nil {
		return err
	}
	if err := d.wal.Repair(); err != nil {
		return fmt.Errorf("raftstore: %w", err)
	}
	// The log is back at its last sync, which may predate a commit index
	// saved without sync since: the next write carries the hard state
	// again, so that a synced Save makes it durable, as Save promises.
	// (Repair itself writes nothing: it must work on a full disk.)
	d.hsRewrite = true
	return nil
}

// removeSnapshotsExcept removes the snapshot files other than keep, and any
// temporary file, then syncs the directory. Files being written in the
// background, or waiting for CompactTo, stay.
func (d *Disk) removeSnapshotsExcept(keep string) error {
	tmps, err := d.unusedSnapshots(keep)
	if err != nil || len(tmps) == 0 {
		return err
	}
	for _, name := range tmps {
		d.logger.Info("raftstore: removing snapshot file", "file", filepath.Join(d.snapDir, name))
		if err := d.fs.Remove(filepath.Join(d.snapDir, name)); err != nil {
			return err
		}
	}
	return d.fs.SyncDir(d.snapDir)
}

// unusedSnapshots returns the names of the snapshot files other than keep,
// and of the temporary files, but those being written in the background or
// waiting for CompactTo.
func (d *Disk) unusedSnapshots(keep string) ([]string, error) {
	files, tmps, err := snapshot.List(d.fs, d.snapDir)
	if err != nil {
		return nil, err
	}
	for _, f := range files {
		if f.Name != keep {
			tmps = append(tmps, f.Name)
		}
	}
	return slices.DeleteFunc(tmps, d.inProgress), nil
}

// retiredSuffix ends the name a replaced snapshot file is renamed to until
// it is removed. It ends in the snapshot package's temporary suffix, so
// that snapshot.List reports such a file as temporary and Open removes it.
const retiredSuffix = ".retired.tmp"

// retireSnapshotsExcept is removeSnapshotsExcept for a Disk in use, called
// once a checkpoint made keep its snapshot: the files it would remove are
// renamed (retiredSuffix), which takes no sync and frees no block, and
// removed, with the directory synced, off the caller's goroutine
// (Options.Background). The rename, under the Disk's lock, is what makes
// the later removal safe: a snapshot written again under a retired file's
// name (a retry at the same index) is a new file the removal never names.
// A crash at any step leaves files the log does not refer to, which Open
// removes.
func (d *Disk) retireSnapshotsExcept(keep string) error {
	names, err := d.unusedSnapshots(keep)
	if err != nil {
		return err
	}
	var retired []string
	for _, name := range names {
		path := filepath.Join(d.snapDir, name)
		if !strings.HasSuffix(name, retiredSuffix) { // else retired already: its removal is on its way
			if err := d.fs.Rename(path, path+retiredSuffix); err != nil {
				return err
			}
			path += retiredSuffix
		}
		retired = append(retired, path)
	}
	if len(retired) == 0 {
		return nil
	}
	fsys, dir, logger := d.fs, d.snapDir, d.logger
	work := func() {
		for _, path := range retired {
			logger.Info("raftstore: removing snapshot file", "file", path)
			if err := fsys.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
				logger.Warn("raftstore: removing a replaced snapshot", "file", path, "err", err)
				return
			}
		}
		if err := fsys.SyncDir(dir); err != nil {
			logger.Warn("raftstore: removing replaced snapshots", "dir", dir, "err", err)
		}
	}
	if d.background != nil {
		d.background(work)
		return nil
	}
	d.removals.Go(work)
	return nil
}

func (d *Disk) usable() error {
	if d.closed {
		return ErrClosed
	}
	return nil
}

// writable is usable for the methods that write: they also fail once the
// directory was found gone (checkDir). Reads go on: they show what was
// acknowledged, as after a failed write.
func (d *Disk) writable() error {
	if err := d.usable(); err != nil {
		return err
	}
	return d.gone
}

// lockInPlace reports whether the directory's LOCK file is the one Open
// locked: the same file, where the lock is an open file of the operating
// system's (so that a directory removed and made again, with a LOCK file
// of another process in it, is not taken for this one), or else a file of
// that name.
func (d *Disk) lockInPlace() (bool, error) {
	name := filepath.Join(d.dir, "LOCK")
	if f, ok := d.lock.(*os.File); ok {
		held, err := f.Stat()
		if err != nil {
			return false, err
		}
		now, err := os.Stat(name)
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		return os.SameFile(held, now), nil
	}
	return vfs.Exists(d.fs, name)
}

// checkDir checks, at most every Options.CheckDirEvery (or now, if force),
// that the directory still holds the LOCK file Open took, and makes the
// Disk refuse writes for good if it does not.
func (d *Disk) checkDir(force bool) error {
	if d.checkDirEvery == 0 {
		return nil
	}
	now := time.Now()
	if !force && now.Sub(d.dirChecked) < d.checkDirEvery {
		return nil
	}
	ok, err := d.lockInPlace()
	if err != nil {
		// Cannot tell (a directory made unreadable, say): the write
		// itself will say whether the disk works.
		d.logger.Warn("raftstore: checking the data directory", "dir", d.dir, "err", err)
		return nil
	}
	if !ok {
		d.gone = fmt.Errorf("%w: the data directory %s was removed or replaced while the node ran (its LOCK file is not the one this node locked): what it held since is unlinked, so this node writes nothing more; restart it on a directory that holds its state", ErrLost, d.dir)
		d.logger.Error("raftstore: data directory gone", "dir", d.dir, "err", d.gone)
		return d.gone
	}
	d.dirChecked = now
	return nil
}

func (d *Disk) firstIndex() uint64 { return d.snapMeta.Index + 1 }

func (d *Disk) lastIndex() uint64 { return d.snapMeta.Index + uint64(len(d.ents)) }

// InitialState implements raft.Storage.
func (d *Disk) InitialState() (raft.HardState, raft.ConfState, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.usable(); err != nil {
		return raft.HardState{}, raft.ConfState{}, err
	}
	return d.hs, cloneConfState(d.snapMeta.ConfState), nil
}

// Entries implements raft.Storage. The entries' Data is shared with the
// Disk and must not be modified; the slice is the caller's.
func (d *Disk) Entries(lo, hi, maxBytes uint64) ([]raft.Entry, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.usable(); err != nil {
		return nil, err
	}
	if lo > hi {
		assert.Fail("raftstore: Entries(lo %d, hi %d) with lo > hi", lo, hi)
	}
	first := d.firstIndex()
	switch {
	case lo < first:
		return nil, raft.ErrCompacted
	case hi > d.lastIndex()+1:
		return nil, raft.ErrUnavailable
	case lo == hi:
		return nil, nil
	}
	ents := d.ents[lo-first : hi-first]
	if maxBytes > 0 {
		n, size := 1, uint64(len(ents[0].Data))
		for n < len(ents) && size+uint64(len(ents[n].Data)) <= maxBytes {
			size += uint64(len(ents[n].Data))
			n++
		}
		ents = ents[:n]
	}
	return slices.Clone(ents), nil
}

// Term implements raft.Storage.
func (d *Disk) Term(i uint64) (uint64, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.usable(); err != nil {
		return 0, err
	}
	switch {
	case i < d.snapMeta.Index:
		return 0, raft.ErrCompacted
	case i == d.snapMeta.Index:
		return d.snapMeta.Term, nil
	case i > d.lastIndex():
		return 0, raft.ErrUnavailable
	}
	return d.ents[i-d.firstIndex()].Term, nil
}

// FirstIndex implements raft.Storage.
func (d *Disk) FirstIndex() (uint64, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.usable(); err != nil {
		return 0, err
	}
	return d.firstIndex(), nil
}

// LastIndex implements raft.Storage.
func (d *Disk) LastIndex() (uint64, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.usable(); err != nil {
		return 0, err
	}
	return d.lastIndex(), nil
}

// Snapshot implements raft.Storage. It does not read the snapshot's
// file: the result's Source (a snapshot.Source) reads it when opened, as
// a stream, and checks it is the file the log refers to (its checksum)
// at the end, so that a snapshot of any size is sent to a follower
// without being held in memory, and restored at start by reading the file
// once (Open read only its header and metadata).
//
// The file stays until a newer snapshot replaces it; a reader opened
// before that goes on reading it (an open file outlives its name), and
// one opened after fails, which the transport reports as a failed send.
func (d *Disk) Snapshot() (raft.Snapshot, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.usable(); err != nil {
		return raft.Snapshot{}, err
	}
	if d.snapMeta.Index == 0 {
		return raft.Snapshot{}, nil
	}
	path := filepath.Join(d.snapDir, snapshot.FileName(d.snapMeta.Index, d.snapMeta.Term))
	return raft.Snapshot{
		Metadata: raft.SnapshotMetadata{Index: d.snapMeta.Index, Term: d.snapMeta.Term, ConfState: cloneConfState(d.snapMeta.ConfState)},
		Source:   snapshot.NewSource(d.fs, path, d.snapSize, d.snapSum),
	}, nil
}

// Save stores hs (unless empty or unchanged) and ents. Entries from
// ents[0].Index on are replaced; entries at or below the snapshot's index
// are ignored. ents must be contiguous and start at most one past
// LastIndex(), and hs must not lower the term or change the vote within a
// term: a caller that breaks these has a bug, and Save panics.
//
// With sync, Save returns once both are durable: a nil return
// acknowledges them. Without it, a Save that changes only the commit index
// is written to the log but not synced (raft.Ready.MustSync is false for
// it: the commit index may be lost in a crash and is learnt again from
// the leader), and becomes durable with the next synced write. Entries and
// a new term or vote are synced whatever sync says.
func (d *Disk) Save(hs raft.HardState, ents []raft.Entry, sync bool) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.writable(); err != nil {
		return err
	}
	if err := d.checkDir(!hs.IsEmpty() && (hs.Term != d.hs.Term || hs.Vote != d.hs.Vote)); err != nil {
		return err
	}
	for i := 1; i < len(ents); i++ {
		if ents[i].Index != ents[i-1].Index+1 {
			assert.Fail("raftstore: Save: entry %d follows %d", ents[i].Index, ents[i-1].Index)
		}
	}
	if len(ents) > 0 && ents[0].Index <= d.snapMeta.Index {
		skip := d.snapMeta.Index - ents[0].Index + 1 // in the snapshot already
		ents = ents[min(skip, uint64(len(ents))):]
	}
	if len(ents) > 0 && ents[0].Index > d.lastIndex()+1 {
		assert.Fail("raftstore: Save: entry %d leaves a gap after the last index %d", firstOf(ents), d.lastIndex())
	}
	writeHS := !hs.IsEmpty() && hs != d.hs
	if writeHS {
		// One vote per term, terms only grow (Raft Figure 2): a core that
		// breaks this would vote twice.
		if hs.Term < d.hs.Term {
			assert.Fail("raftstore: Save: term goes back from %d to %d", d.hs.Term, hs.Term)
		}
		if hs.Term <= d.hs.Term && d.hs.Vote != 0 && hs.Vote != d.hs.Vote {
			assert.Fail("raftstore: Save: vote in term %d changes from %d to %d", hs.Term, d.hs.Vote, hs.Vote)
		}
	}
	if len(ents) == 0 && !writeHS {
		return nil
	}
	if writeHS && (vote{hs.Term, hs.Vote} != d.voteFile.vote) {
		// The term and vote go to their own file first: a log that loses
		// its tail must not take a vote with it (Raft Figure 2: one vote
		// per term, on stable storage before the response). Before the
		// log holds anything durable the file says so, so that a crash
		// before the log's first sync is not taken for a lost log.
		var flags uint32
		if !d.logDurable {
			flags = voteBeforeLog
		}
		// The commit index goes with them when it is one the log holds
		// durably (a Save without entries: d's entries are durable), so
		// that such a Save is durable whole without the log's sync.
		var commit uint64
		if len(ents) == 0 && hs.Commit <= d.lastIndex() {
			commit = hs.Commit
		}
		// Never below what the file holds: after a vote-only Save that
		// commit index is durable nowhere else (the log's record of it
		// is not synced), and this Save may fail after replacing the
		// file but before the log takes its own record. It is still a
		// committed index the log holds durably: committed entries are
		// never truncated.
		commit = max(commit, d.voteFile.commit)
		if err := d.writeVote(vote{hs.Term, hs.Vote}, flags, commit); err != nil {
			return fmt.Errorf("raftstore: save: vote: %w", err)
		}
	}
	var record raft.HardState
	switch {
	case writeHS:
		record = hs
	case d.hsRewrite:
		record = d.hs
	}
	// Only a commit index may wait for the next sync: a vote or an entry
	// the node has promised must not be lost.
	commitOnly := len(ents) == 0 && hs.Term == d.hs.Term && hs.Vote == d.hs.Vote
	// A new term or vote without entries is durable already, with its
	// commit index, in the VOTE file, which Open prefers to an older log
	// record (checkLog): its log record need not be synced (unless a
	// Repair lost the records since the last sync, which the next sync
	// must bring back). It becomes durable with the next sync. This saves
	// an election one fsync on the candidate and each voter.
	voteOnly := len(ents) == 0 && !commitOnly && !d.hsRewrite &&
		d.voteFile.vote == (vote{hs.Term, hs.Vote}) && d.voteFile.commit == hs.Commit
	if err := d.wal.Append(record, ents); err != nil {
		return fmt.Errorf("raftstore: save: %w", err)
	}
	synced := (sync || !commitOnly) && !voteOnly
	if synced {
		if err := d.wal.Sync(); err != nil {
			return fmt.Errorf("raftstore: save: %w", err)
		}
	}
	// Durable (or, for a commit index alone, as durable as asked): now
	// reads may show it.
	d.hsRewrite = false
	if writeHS {
		d.hs = hs
	}
	if len(ents) > 0 {
		d.ents = append(d.ents[:ents[0].Index-d.firstIndex()], cloneEntries(ents)...)
	}
	if synced {
		d.logSynced()
	}
	return nil
}

// logSynced notes that the log's records so far are durable, d.hs
// included, and clears the VOTE file's voteBeforeLog flag if the log holds
// something durable now.
func (d *Disk) logSynced() {
	if !d.hs.IsEmpty() || len(d.ents) > 0 || d.snapMeta.Index > 0 {
		d.logDurable = true
	}
	d.logStarted()
}

// logStarted clears the VOTE file's voteBeforeLog flag once the log holds
// something durable, so that from then on a log found empty beside the
// file is a lost one. A failure is logged and retried at the next sync:
// the flag only weakens that check meanwhile.
func (d *Disk) logStarted() {
	if d.voteFile.flags&voteBeforeLog == 0 || !d.logDurable {
		return
	}
	if err := d.writeVote(d.voteFile.vote, 0, d.voteFile.commit); err != nil {
		d.logger.Warn("raftstore: rewrite the vote file once the log started", "dir", d.dir, "err", err)
	}
}

func firstOf(ents []raft.Entry) uint64 {
	if len(ents) == 0 {
		return 0
	}
	return ents[0].Index
}

// ApplySnapshot installs snap, received from a leader, and returns once it
// is durable: the whole log is replaced by it, and the hard state's Commit
// is raised to snap's index if it was below. ErrSnapshotOutOfDate if snap is
// not newer than the current snapshot.
//
// A snapshot this Disk spooled (ReceiveSnapshot: snap.Source is the
// Source its Commit returned) is adopted where it lies: renamed to its
// final name, the directory fsynced, then the log checkpoint written, with
// no byte of it copied or held in memory. Any other snapshot (Data, or
// another Source) is streamed into a new file.
func (d *Disk) ApplySnapshot(snap raft.Snapshot) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.writable(); err != nil {
		return err
	}
	if snap.Metadata.Index <= d.snapMeta.Index {
		return fmt.Errorf("raftstore: apply snapshot at index %d, have one at %d: %w",
			snap.Metadata.Index, d.snapMeta.Index, raft.ErrSnapshotOutOfDate)
	}
	hs := d.hs
	hs.Commit = max(hs.Commit, snap.Metadata.Index)
	if r := d.receivedFor(snap); r != nil {
		if err := d.adopt(r, snap.Metadata, hs); err != nil {
			return fmt.Errorf("raftstore: apply snapshot: %w", err)
		}
		return nil
	}
	if err := d.install(snap, hs, nil); err != nil {
		return fmt.Errorf("raftstore: apply snapshot: %w", err)
	}
	return nil
}

// Compact records a snapshot of the application's state (data) as of log
// index index, with membership cs, discards the entries up to index, and
// returns once that is durable. The entries after index are rewritten into
// a new log segment. ErrSnapshotOutOfDate if index is not above the current
// snapshot's; ErrUnavailable if it is above LastIndex(). The caller must
// only compact applied, hence committed, entries.
func (d *Disk) Compact(index uint64, data []byte, cs raft.ConfState) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.writable(); err != nil {
		return err
	}
	switch {
	case index <= d.snapMeta.Index:
		return fmt.Errorf("raftstore: compact at index %d, have a snapshot at %d: %w",
			index, d.snapMeta.Index, raft.ErrSnapshotOutOfDate)
	case index > d.lastIndex():
		return fmt.Errorf("raftstore: compact at index %d, past the last index %d: %w",
			index, d.lastIndex(), raft.ErrUnavailable)
	}
	pos := index - d.firstIndex()
	snap := raft.Snapshot{
		Metadata: raft.SnapshotMetadata{Index: index, Term: d.ents[pos].Term, ConfState: cloneConfState(cs)},
		Data:     data,
	}
	if err := d.install(snap, d.hs, d.ents[pos+1:]); err != nil {
		return fmt.Errorf("raftstore: compact: %w", err)
	}
	return nil
}

// install writes snap's file, then a log checkpoint referring to it with hs
// and the entries kept after it, then removes the snapshot files it
// replaces. The in-memory state changes only once both are durable.
func (d *Disk) install(snap raft.Snapshot, hs raft.HardState, keep []raft.Entry) error {
	name, sum, size, err := writeSnapshotFile(d, snap)
	if err != nil {
		return err
	}
	return d.checkpoint(snap.Metadata, sum, size, hs, keep, name)
}

// writeSnapshotFile writes snap's file, streaming its data from Data or
// Source, and returns the file's name, checksum and data length.
func writeSnapshotFile(d *Disk, snap raft.Snapshot) (name string, sum uint32, size int64, err error) {
	if snap.IsEmpty() {
		return "", 0, 0, snapshot.ErrEmpty
	}
	r, err := snap.Open()
	if err != nil {
		return "", 0, 0, err
	}
	defer r.Close()
	w, err := snapshot.Create(d.fs, d.snapDir, snap.Metadata)
	if err != nil {
		return "", 0, 0, err
	}
	if _, err := io.Copy(w, r); err != nil {
		return "", 0, 0, errors.Join(err, w.Abort())
	}
	if w.Size() != snap.Size() {
		err := fmt.Errorf("snapshot data of %d bytes, its source said %d", w.Size(), snap.Size())
		return "", 0, 0, errors.Join(err, w.Abort())
	}
	sum, err = w.Commit()
	return w.Name(), sum, w.Size(), err
}

// checkpoint writes the log checkpoint that makes the snapshot file name
// (metadata meta, checksum sum, size bytes of data) the Disk's snapshot,
// with hs and the entries kept after it, then removes the snapshot files
// it replaces. The in-memory state changes only once it is durable.
func (d *Disk) checkpoint(meta raft.SnapshotMetadata, sum uint32, size int64, hs raft.HardState, keep []raft.Entry, name string) error {
	cp := wal.Checkpoint{Index: meta.Index, Term: meta.Term, SnapshotChecksum: sum}
	if err := d.wal.Checkpoint(cp, hs, keep); err != nil {
		return err
	}
	d.hs, d.snapMeta, d.snapSum, d.snapSize = hs, cloneMeta(meta), sum, size
	d.hsRewrite = false         // the checkpoint holds hs
	d.ents = slices.Clone(keep) // frees the compacted prefix
	d.logSynced()
	d.dropStaleReceived()
	// The checkpoint holds; a file left behind is removed by the next Open.
	if err := d.retireSnapshotsExcept(name); err != nil {
		d.logger.Warn("raftstore: removing replaced snapshots", "dir", d.snapDir, "err", err)
	}
	return nil
}

func cloneMeta(m raft.SnapshotMetadata) raft.SnapshotMetadata {
	return raft.SnapshotMetadata{Index: m.Index, Term: m.Term, ConfState: cloneConfState(m.ConfState)}
}

// Close closes the Disk. Methods called after it return ErrClosed.
func (d *Disk) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil
	}
	d.closed = true
	d.removals.Wait()
	err := errors.Join(d.wal.Close(), d.closeVoteFile())
	if lerr := d.lock.Close(); err == nil {
		err = lerr
	}
	return err
}

func cloneEntries(ents []raft.Entry) []raft.Entry {
	out := make([]raft.Entry, len(ents))
	for i, e := range ents {
		out[i] = e
		if len(e.Data) > 0 {
			out[i].Data = slices.Clone(e.Data)
		} else {
			out[i].Data = nil
		}
	}
	return out
}

func cloneConfState(cs raft.ConfState) raft.ConfState {
	return raft.ConfState{
		Voters:         slices.Clone(cs.Voters),
		Learners:       slices.Clone(cs.Learners),
		VotersOutgoing: slices.Clone(cs.VotersOutgoing),
	}
}
