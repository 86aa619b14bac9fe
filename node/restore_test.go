package node

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"coord/raft"
)

// source is a snapshot's data behind a raft.SnapshotSource, as a file's
// would be; its size may lie.
type source struct {
	data []byte
	size int64
	err  error // returned with the last bytes, as a damaged file's reader does
}

func (s source) Size() int64 { return s.size }
func (s source) Open() (io.ReadCloser, error) {
	var r io.Reader = bytes.NewReader(s.data)
	if s.err != nil {
		r = io.MultiReader(r, errReader{s.err})
	}
	return io.NopCloser(r), nil
}

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }

// bufferMachine restores from a buffer only; streamMachine also from a
// reader, and records which it was given.
type bufferMachine struct{ state []byte }

func (m *bufferMachine) Apply(uint64, []byte) any  { return nil }
func (m *bufferMachine) Snapshot() ([]byte, error) { return m.state, nil }
func (m *bufferMachine) Restore(data []byte) error { m.state = data; return nil }

type streamMachine struct {
	bufferMachine
	streamed bool
}

func (m *streamMachine) RestoreFrom(r io.Reader, size int64) error {
	data, err := io.ReadAll(io.LimitReader(r, size))
	if err != nil {
		return err
	}
	m.state, m.streamed = data, true
	return nil
}

func TestRestoreStreamsFromASource(t *testing.T) {
	want := []byte("the state at 9")
	snap := raft.Snapshot{Metadata: raft.SnapshotMetadata{Index: 9, Term: 2}, Source: source{data: want, size: int64(len(want))}}

	sm := &streamMachine{}
	if err := restore(sm, snap); err != nil || !sm.streamed || !bytes.Equal(sm.state, want) {
		t.Fatalf("a StreamRestorer: streamed %v, state %q, %v; want the source's data streamed", sm.streamed, sm.state, err)
	}
	bm := &bufferMachine{}
	if err := restore(bm, snap); err != nil || !bytes.Equal(bm.state, want) {
		t.Fatalf("a machine without RestoreFrom: state %q, %v; want the source read into a buffer", bm.state, err)
	}
	if err := restore(bm, raft.Snapshot{Metadata: snap.Metadata, Data: []byte("in memory")}); err != nil || string(bm.state) != "in memory" {
		t.Fatalf("a snapshot in Data: state %q, %v", bm.state, err)
	}

	// A source that is not what its size says, or that fails, is an
	// error; the buffer-only machine is left as it was.
	bm.state = []byte("before")
	short := snap
	short.Source = source{data: want, size: int64(len(want)) + 5}
	if err := restore(bm, short); err == nil || !strings.Contains(err.Error(), "its source says") {
		t.Fatalf("a source shorter than its size: %v", err)
	}
	damaged := snap
	damaged.Source = source{data: want, size: int64(len(want)) + 1, err: errors.New("checksum mismatch")}
	if err := restore(bm, damaged); err == nil || !strings.Contains(err.Error(), "checksum mismatch") {
		t.Fatalf("a damaged source: %v", err)
	}
	if string(bm.state) != "before" {
		t.Fatalf("a failed restore changed the state to %q", bm.state)
	}
}
