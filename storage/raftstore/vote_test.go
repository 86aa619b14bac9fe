package raftstore_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"coord/raft"
	"coord/storage/raftstore"
	"coord/storage/vfs"
)

// The VOTE file's layout, as the package doc of vote.go gives it: two
// 56-byte slots at offsets 0 and 4096 of an 8192-byte file. A slot's
// record is 52 bytes and a CRC-32C its last 4; 4 zero bytes follow.
const (
	slotSize   = 56
	recordSize = 52
	slotOffset = 4096
	voteBytes  = 2 * slotOffset
)

// voted returns a MemFS whose /node has entries up to index 3 in term 1,
// synced, and a vote-only Save of term 2 (vote 1) and term 3 (vote 2), so
// that both slots of its VOTE file hold a record.
func voted(t *testing.T) *vfs.MemFS {
	t.Helper()
	m := vfs.NewMemFS()
	d := open(t, m, "/node")
	must(t, d.SetIdentity(identity))
	must(t, d.Save(raft.HardState{Term: 1, Vote: 1, Commit: 2}, ents(1, 3, 1), true))
	must(t, d.Save(raft.HardState{Term: 2, Vote: 1, Commit: 2}, nil, true))
	must(t, d.Save(raft.HardState{Term: 3, Vote: 2, Commit: 2}, nil, true))
	must(t, d.Close())
	return m
}

func hardState(t *testing.T, m vfs.FS) (raft.HardState, error) {
	t.Helper()
	d, err := raftstore.Open(m, "/node", opts)
	if err != nil {
		return raft.HardState{}, err
	}
	defer d.Close()
	hs, _, err := d.InitialState()
	return hs, err
}

// writeFile replaces name by data, durably.
func writeFile(t *testing.T, m vfs.FS, name string, data []byte) {
	t.Helper()
	f, err := m.Create(name)
	must(t, err)
	_, err = f.Write(data)
	must(t, err)
	must(t, f.Sync())
	must(t, f.Close())
	must(t, m.SyncDir(filepath.Dir(name)))
}

// A vote-only Save is one write and one sync, of the VOTE file: no
// rename, no directory sync, no sync of the log (its record there is
// synced with the next write that syncs the log). A Save whose commit
// index is not durable yet still syncs the log, and entries always do.
func TestVoteOnlySaveSyncsOnce(t *testing.T) {
	var (
		mu   sync.Mutex
		seen []string
	)
	record := func(op vfs.Op) vfs.Fault {
		switch op.Kind {
		case vfs.OpSync, vfs.OpSyncDir, vfs.OpRename:
			mu.Lock()
			name := op.Name
			if strings.HasPrefix(name, "/node/wal/") {
				name = "/node/wal/*"
			}
			seen = append(seen, op.Kind.String()+" "+name)
			mu.Unlock()
		}
		return vfs.NoFault
	}
	f := vfs.NewFaultFS(vfs.NewMemFS(), 1, record)
	d := open(t, f, "/node")
	must(t, d.SetIdentity(identity))
	must(t, d.Save(raft.HardState{Term: 1, Vote: 1, Commit: 1}, ents(1, 2, 1), true))
	must(t, d.Save(raft.HardState{Term: 2, Vote: 1, Commit: 1}, nil, true)) // the file's first slot write
	steps := []struct {
		name string
		hs   raft.HardState
		ents []raft.Entry
		want []string
	}{
		{"new term, vote", raft.HardState{Term: 3, Vote: 2, Commit: 1}, nil, []string{"sync /node/VOTE"}},
		{"new term, no vote", raft.HardState{Term: 4, Commit: 1}, nil, []string{"sync /node/VOTE"}},
		{"vote in the same term", raft.HardState{Term: 4, Vote: 3, Commit: 1}, nil, []string{"sync /node/VOTE"}},
		{"new term and a commit index the log has not synced", raft.HardState{Term: 5, Vote: 3, Commit: 2}, nil,
			[]string{"sync /node/VOTE"}},
		{"entries", raft.HardState{Term: 5, Vote: 3, Commit: 2}, ents(3, 1, 5), []string{"sync /node/wal/*"}},
		{"new term with entries", raft.HardState{Term: 6, Vote: 3, Commit: 3}, ents(4, 1, 6),
			[]string{"sync /node/VOTE", "sync /node/wal/*"}},
	}
	for _, step := range steps {
		mu.Lock()
		seen = nil
		mu.Unlock()
		must(t, d.Save(step.hs, step.ents, true))
		mu.Lock()
		got := fmt.Sprint(seen)
		mu.Unlock()
		if want := fmt.Sprint(step.want); got != want {
			t.Errorf("%s: Save did %s, want %s", step.name, got, want)
		}
	}
}

// A Save of a term and vote alone keeps its commit index through a crash
// without the log's sync: the VOTE file has it, and Open takes the higher
// of it and the log's. A commit index past the log's end in the VOTE file
// (a log that lost synced entries) is not taken.
func TestVoteOnlySaveKeepsItsCommitIndex(t *testing.T) {
	m := vfs.NewMemFS()
	d := open(t, m, "/node")
	must(t, d.SetIdentity(identity))
	must(t, d.Save(raft.HardState{Term: 1, Vote: 1, Commit: 1}, ents(1, 3, 1), true))
	must(t, d.Save(raft.HardState{Term: 1, Vote: 1, Commit: 2}, nil, false)) // a commit index alone, not synced
	want := raft.HardState{Term: 2, Vote: 3, Commit: 3}
	must(t, d.Save(want, nil, true))
	m.Crash()
	if hs, err := hardState(t, m); err != nil || hs != want {
		t.Fatalf("after a vote-only Save and a crash: %+v (%v), want %+v", hs, err, want)
	}

	// The same VOTE file beside a log cut to its first two entries.
	m = vfs.NewMemFS()
	d = open(t, m, "/node")
	must(t, d.SetIdentity(identity))
	must(t, d.Save(raft.HardState{Term: 1, Vote: 1, Commit: 1}, ents(1, 2, 1), true))
	must(t, d.Close())
	short, err := vfs.ReadFile(m, "/node/wal/"+list(t, m, "/node/wal")[0])
	must(t, err)
	d = open(t, m, "/node")
	must(t, d.Save(raft.HardState{Term: 1, Vote: 1, Commit: 1}, ents(3, 1, 1), true))
	must(t, d.Save(want, nil, true))
	m.Crash()
	writeFile(t, m, "/node/wal/"+list(t, m, "/node/wal")[0], short)
	if hs, err := hardState(t, m); err != nil || hs != (raft.HardState{Term: 2, Vote: 3, Commit: 1}) {
		t.Fatalf("VOTE's commit index past the log's end: %+v (%v), want term 2 vote 3 commit 1", hs, err)
	}
}

// A write into a slot torn at any byte (the record's first k bytes new,
// the rest as before, or zeros) leaves the file reading as before the
// write, from the other slot; only the whole record makes it the new one.
// Both cases are checked: a tear over an older record, and over the zeros
// of a slot never written.
func TestVoteSlotTornAtEveryByte(t *testing.T) {
	for _, tt := range []struct {
		name     string
		previous raft.HardState // the file's content before the write
		next     raft.HardState // the write torn
	}{
		{"over zeros", raft.HardState{Term: 2, Vote: 1, Commit: 2}, raft.HardState{Term: 3, Vote: 2, Commit: 2}},
		{"over an older record", raft.HardState{Term: 3, Vote: 2, Commit: 2}, raft.HardState{Term: 4, Vote: 3, Commit: 2}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m := vfs.NewMemFS()
			d := open(t, m, "/node")
			must(t, d.SetIdentity(identity))
			must(t, d.Save(raft.HardState{Term: 1, Vote: 1, Commit: 2}, ents(1, 3, 1), true))
			for term := uint64(2); term <= tt.previous.Term; term++ {
				must(t, d.Save(raft.HardState{Term: term, Vote: term - 1, Commit: 2}, nil, true))
			}
			before, err := vfs.ReadFile(m, "/node/VOTE")
			must(t, err)
			must(t, d.Save(tt.next, nil, true))
			// The log's record of the vote was not synced: a crash
			// leaves the vote in the VOTE file alone.
			m.Crash()
			after, err := vfs.ReadFile(m, "/node/VOTE")
			must(t, err)
			if len(before) != voteBytes || len(after) != voteBytes {
				t.Fatalf("VOTE file of %d then %d bytes, want %d", len(before), len(after), voteBytes)
			}
			slot := -1
			for i := range 2 {
				if !bytes.Equal(before[i*slotOffset:(i+1)*slotOffset], after[i*slotOffset:(i+1)*slotOffset]) {
					if slot >= 0 {
						t.Fatal("the write changed both slots")
					}
					slot = i
				}
			}
			if slot < 0 {
				t.Fatal("the write changed no slot")
			}
			if hs, err := hardState(t, m); err != nil || hs != tt.next {
				t.Fatalf("the whole write: hard state %+v (%v), want %+v", hs, err, tt.next)
			}
			for k := range recordSize {
				for _, rest := range []string{"old bytes", "zeros"} {
					torn := bytes.Clone(before)
					start := slot * slotOffset
					copy(torn[start:start+k], after[start:start+k])
					if rest == "zeros" {
						clear(torn[start+k : start+recordSize])
					}
					writeFile(t, m, "/node/VOTE", torn)
					hs, err := hardState(t, m)
					if err != nil || hs != tt.previous {
						t.Fatalf("slot %d torn after %d bytes, then %s: hard state %+v (%v), want %+v",
							slot, k, rest, hs, err, tt.previous)
					}
				}
			}
		})
	}
}

// A crash at every file system operation of a vote-only Save (the slot
// written but not synced, among others), strict or torn, leaves the vote
// before the Save or the new one: the new one if the Save returned nil.
func TestVoteCrashDuringSave(t *testing.T) {
	old := raft.HardState{Term: 3, Vote: 2, Commit: 2}
	next := raft.HardState{Term: 4, Vote: 3, Commit: 2}
	dry := voted(t)
	d := open(t, dry, "/node")
	base := dry.Ops()
	must(t, d.Save(next, nil, true))
	total := dry.Ops() - base
	if total < 2 {
		t.Fatalf("a vote-only Save did %d file system operations", total)
	}
	for point := 1; point <= total; point++ {
		for mode := range 4 {
			m := voted(t)
			d := open(t, m, "/node")
			m.SetCrashPoint(point)
			err := d.Save(next, nil, true)
			crash(m, mode, uint64(point))
			hs, oerr := hardState(t, m)
			switch {
			case oerr != nil:
				t.Fatalf("crash at operation %d of %d, mode %d: Open: %v", point, total, mode, oerr)
			case hs != old && hs != next, err == nil && hs != next:
				t.Fatalf("crash at operation %d of %d, mode %d (Save returned %v): hard state %+v, want %+v or %+v",
					point, total, mode, err, hs, old, next)
			}
			// The recovered Disk goes on voting.
			d = open(t, m, "/node")
			later := raft.HardState{Term: 5, Vote: 1, Commit: 2}
			must(t, d.Save(later, nil, true))
			m.Crash()
			if hs, err := hardState(t, m); err != nil || hs != later {
				t.Fatalf("crash at operation %d, mode %d, then a Save and a crash: %+v (%v), want %+v", point, mode, hs, err, later)
			}
		}
	}
}

// A failed slot write or sync fails the Save; the next Save writes the
// same slot again (the other one still holds the newest durable record).
func TestVoteWriteFails(t *testing.T) {
	for _, kind := range []vfs.OpKind{vfs.OpWrite, vfs.OpSync} {
		t.Run(kind.String(), func(t *testing.T) {
			m := voted(t)
			var fail bool
			f := vfs.NewFaultFS(m, 1, func(op vfs.Op) vfs.Fault {
				if fail && op.Kind == kind && op.Name == "/node/VOTE" {
					return vfs.FaultError
				}
				return vfs.NoFault
			})
			d := open(t, f, "/node")
			fail = true
			err := d.Save(raft.HardState{Term: 4, Vote: 3, Commit: 2}, nil, true)
			if !errors.Is(err, vfs.ErrInjected) {
				t.Fatalf("Save with a failing %v: %v, want ErrInjected", kind, err)
			}
			fail = false
			m.Crash()
			if hs, err := hardState(t, m); err != nil || hs != (raft.HardState{Term: 3, Vote: 2, Commit: 2}) {
				t.Fatalf("after the failed Save and a crash: %+v (%v), want term 3 vote 2", hs, err)
			}
			d = open(t, f, "/node")
			for term := uint64(4); term <= 6; term++ {
				must(t, d.Save(raft.HardState{Term: term, Vote: 1, Commit: 2}, nil, true))
			}
			m.Crash()
			if hs, err := hardState(t, m); err != nil || hs != (raft.HardState{Term: 6, Vote: 1, Commit: 2}) {
				t.Fatalf("after three Saves and a crash: %+v (%v), want term 6 vote 1", hs, err)
			}
		})
	}
}

// encodeVote1 is a VOTE file of the format earlier builds wrote (version
// 1, 40 bytes).
func encodeVote1(term, vote uint64, flags uint32) []byte {
	b := []byte("coordVOT")
	b = binary.LittleEndian.AppendUint32(b, 1)
	b = binary.LittleEndian.AppendUint32(b, flags)
	b = binary.LittleEndian.AppendUint64(b, term)
	b = binary.LittleEndian.AppendUint64(b, vote)
	b = binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli)))
	return binary.LittleEndian.AppendUint32(b, 0)
}

// A directory written by an earlier build (a 40-byte VOTE file) opens with
// its vote, and the first vote Save replaces the file by the two-slot one:
// a crash at any point of that leaves the old vote or the new.
func TestVoteFileUpgrade(t *testing.T) {
	old := raft.HardState{Term: 3, Vote: 2, Commit: 2}
	next := raft.HardState{Term: 4, Vote: 3, Commit: 2}
	legacy := func(t *testing.T) *vfs.MemFS {
		m := voted(t) // its log holds term 3, vote 2
		writeFile(t, m, "/node/VOTE", encodeVote1(3, 2, 0))
		return m
	}
	m := legacy(t)
	if hs, err := hardState(t, m); err != nil || hs != old {
		t.Fatalf("Open with a version 1 VOTE file: %+v (%v), want %+v", hs, err, old)
	}
	d := open(t, m, "/node")
	base := m.Ops()
	must(t, d.Save(next, nil, true))
	total := m.Ops() - base
	must(t, d.Close())
	if data, err := vfs.ReadFile(m, "/node/VOTE"); err != nil || len(data) != voteBytes {
		t.Fatalf("VOTE file after the upgrade: %d bytes (%v), want %d", len(data), err, voteBytes)
	}
	for point := 1; point <= total; point++ {
		for mode := range 3 {
			m := legacy(t)
			d := open(t, m, "/node")
			m.SetCrashPoint(point)
			err := d.Save(next, nil, true)
			crash(m, mode, uint64(point))
			hs, oerr := hardState(t, m)
			if oerr != nil || (hs != old && hs != next) || (err == nil && hs != next) {
				t.Fatalf("crash at operation %d of %d of the upgrade, mode %d (Save returned %v): %+v (%v), want %+v or %+v",
					point, total, mode, err, hs, oerr, old, next)
			}
		}
	}

	// A version 1 file flagged voteBeforeLog beside an empty log is a new
	// node that crashed in its first Save, as before.
	m = vfs.NewMemFS()
	d = open(t, m, "/node")
	must(t, d.SetIdentity(identity))
	must(t, d.Close())
	writeFile(t, m, "/node/VOTE", encodeVote1(2, 1, 1))
	if hs, err := hardState(t, m); err != nil || hs != (raft.HardState{Term: 2, Vote: 1}) {
		t.Fatalf("version 1 file flagged before the log: %+v (%v), want term 2 vote 1", hs, err)
	}
}

// A damaged VOTE file is refused with an error that says what is wrong,
// and nothing is changed.
func TestBadVoteFiles(t *testing.T) {
	slot := func(b []byte, i int) []byte { return b[i*slotOffset : i*slotOffset+slotSize] }
	reseal := func(rec []byte) {
		binary.LittleEndian.PutUint32(rec[48:], crc32.Checksum(rec[:48], crc32.MakeTable(crc32.Castagnoli)))
	}
	tests := []struct {
		name   string
		change func(b []byte) []byte
		text   string
	}{
		{"truncated", func(b []byte) []byte { return b[:100] }, "100 bytes, want 8192"},
		{"both slots damaged", func(b []byte) []byte {
			slot(b, 0)[30] ^= 1
			slot(b, 1)[30] ^= 1
			return b
		}, "no valid slot"},
		{"two slots of one sequence", func(b []byte) []byte {
			copy(slot(b, 0)[16:24], slot(b, 1)[16:24])
			reseal(slot(b, 0))
			return b
		}, "is newer than slot"},
		{"the newer slot at a lower term", func(b []byte) []byte {
			newer := 0
			if binary.LittleEndian.Uint64(slot(b, 1)[16:]) > binary.LittleEndian.Uint64(slot(b, 0)[16:]) {
				newer = 1
			}
			binary.LittleEndian.PutUint64(slot(b, newer)[24:], 1)
			reseal(slot(b, newer))
			return b
		}, "is newer than slot"},
		{"a newer format version", func(b []byte) []byte {
			for i := range 2 {
				binary.LittleEndian.PutUint32(slot(b, i)[8:], 3)
				reseal(slot(b, i))
			}
			return b
		}, "format version 3"},
		{"version 1 damaged", func([]byte) []byte {
			b := encodeVote1(3, 2, 0)
			b[20] ^= 1
			return b
		}, "checksum"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := voted(t)
			rewrite(t, m, "/node/VOTE", tt.change)
			damaged, err := vfs.ReadFile(m, "/node/VOTE")
			must(t, err)
			_, err = raftstore.Open(m, "/node", opts)
			if !errors.Is(err, raftstore.ErrCorrupt) || !strings.Contains(err.Error(), tt.text) {
				t.Fatalf("Open: %v\nwant ErrCorrupt mentioning %q", err, tt.text)
			}
			if after, err := vfs.ReadFile(m, "/node/VOTE"); err != nil || !bytes.Equal(after, damaged) {
				t.Fatalf("the refused Open changed the VOTE file (%v)", err)
			}
		})
	}
}

// Elections and crashes, many times over: random vote-only Saves, entry
// Saves and torn crashes, never a vote forgotten once its Save returned.
func TestVotesSurviveTornCrashes(t *testing.T) {
	for seed := range uint64(40) {
		rng := rand.New(rand.NewPCG(seed, 5))
		m := vfs.NewMemFS()
		d := open(t, m, "/node")
		must(t, d.SetIdentity(identity))
		hs := raft.HardState{Term: 1, Vote: 1}
		must(t, d.Save(hs, ents(1, 1, 1), true))
		last := uint64(1)
		for step := range 30 {
			switch rng.IntN(3) {
			case 0:
				last++
				must(t, d.Save(hs, ents(last, 1, hs.Term), true))
			case 1:
				hs.Term, hs.Vote = hs.Term+1, 1+rng.Uint64N(3)
				must(t, d.Save(hs, nil, true))
			default:
				m.CrashTorn(rand.New(rand.NewPCG(seed, uint64(step))))
				got, err := hardState(t, m)
				if err != nil || got.Term != hs.Term || got.Vote != hs.Vote {
					t.Fatalf("seed %d step %d: after a torn crash, hard state %+v (%v), want term %d vote %d",
						seed, step, got, err, hs.Term, hs.Vote)
				}
				d = open(t, m, "/node")
			}
		}
		must(t, d.Close())
	}
}

// A slot that is not blank but holds no valid record (the newest vote
// damaged, or a write torn by a crash: the two look alike) is survived
// with the other slot's vote, and Open says so in a warning; a blank slot
// (a file written once) is not worth one.
func TestDamagedVoteSlotIsReported(t *testing.T) {
	m := vfs.NewMemFS()
	d := open(t, m, "/node")
	must(t, d.SetIdentity(identity))
	must(t, d.Save(raft.HardState{Term: 1, Vote: 1, Commit: 2}, ents(1, 3, 1), true))
	must(t, d.Close())
	var log bytes.Buffer
	withLog := opts
	withLog.Logger = slog.New(slog.NewTextHandler(&log, nil))
	reopen := func() raft.HardState {
		t.Helper()
		log.Reset()
		d, err := raftstore.Open(m, "/node", withLog)
		must(t, err)
		defer d.Close()
		hs, _, err := d.InitialState()
		must(t, err)
		return hs
	}
	if reopen(); strings.Contains(log.String(), "VOTE") {
		t.Fatalf("a blank second slot was reported: %s", log.String())
	}
	d = open(t, m, "/node")
	must(t, d.Save(raft.HardState{Term: 2, Vote: 2, Commit: 2}, nil, true))
	m.Crash() // the log's record of the vote was not synced: the VOTE file alone has it
	data, err := vfs.ReadFile(m, "/node/VOTE")
	must(t, err)
	newest := 0 // the slot with the higher sequence (bytes 16-23)
	if binary.LittleEndian.Uint64(data[slotOffset+16:]) > binary.LittleEndian.Uint64(data[16:]) {
		newest = 1
	}
	data[newest*slotOffset+24] ^= 1 // in the term
	writeFile(t, m, "/node/VOTE", data)
	if hs := reopen(); hs.Term != 1 || hs.Vote != 1 {
		t.Fatalf("hard state %+v, want the other slot's term 1, vote 1", hs)
	}
	if got := log.String(); !strings.Contains(got, "level=WARN") || !strings.Contains(got, fmt.Sprintf("slot %d", newest)) {
		t.Fatalf("no warning naming slot %d: %q", newest, got)
	}
}

// A process that dies after a vote-only Save (its log record written, not
// synced) and restarts finds that record in the page cache; a power loss
// after its next vote must not turn the log it counted on into a lost one
// (ErrLost): Open syncs what it read, so the record is durable by then.
func TestRestartAfterAnUnsyncedVoteThenPowerLoss(t *testing.T) {
	m := vfs.NewMemFS()
	d := open(t, m, "/node")
	must(t, d.SetIdentity(identity))
	must(t, d.Save(raft.HardState{Term: 1, Vote: 3}, nil, true))
	m.ReleaseLocks() // the process dies; the machine stays up
	d = open(t, m, "/node")
	must(t, d.Save(raft.HardState{Term: 2, Vote: 3}, nil, true))
	m.Crash() // the power goes
	if hs, err := hardState(t, m); err != nil || hs.Term != 2 || hs.Vote != 3 {
		t.Fatalf("after the power loss: hard state %+v, %v; want term 2, vote 3", hs, err)
	}
}

// TestFailedSaveKeepsVoteFileCommit: a vote-only Save's commit index is
// durable only in the VOTE file (its log record is not synced). A later
// Save with a new vote and entries replaces the file first; if the log
// then fails to take the entries and the node crashes, the commit index
// must survive: the file carried it forward. (TestInjectedFaults found
// this with an injected Allocate failure while the log started a segment.)
func TestFailedSaveKeepsVoteFileCommit(t *testing.T) {
	m := vfs.NewMemFS()
	failLog := false
	f := vfs.NewFaultFS(m, 1, func(op vfs.Op) vfs.Fault {
		if failLog && strings.HasPrefix(op.Name, "/node/wal/") && (op.Kind == vfs.OpWrite || op.Kind == vfs.OpAllocate) {
			return vfs.FaultError
		}
		return vfs.NoFault
	})
	d, err := raftstore.Open(f, "/node", opts)
	must(t, err)
	must(t, d.Save(raft.HardState{Term: 1, Vote: 1}, entries(1, 5, 1), true))
	must(t, d.Save(raft.HardState{Term: 2, Commit: 5}, nil, true)) // vote-only: the VOTE file has commit 5
	failLog = true
	if err := d.Save(raft.HardState{Term: 3, Vote: 3, Commit: 5}, entries(6, 7, 3), true); !errors.Is(err, vfs.ErrInjected) {
		t.Fatalf("Save with the log failing: %v, want an injected fault", err)
	}
	m.Crash()
	d = open(t, m, "/node")
	hs, _, err := d.InitialState()
	must(t, err)
	if hs.Commit != 5 || hs.Term < 2 {
		t.Fatalf("recovered hard state %+v: want term 2 or 3 and commit 5, acknowledged by the vote-only Save", hs)
	}
}
