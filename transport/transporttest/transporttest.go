package transporttest

import (
	"bytes"
	"reflect"
	"slices"
	"testing"
	"time"

	"coord/node"
	"coord/raft"
)

// Endpoint is one node's side of the transport under test.
type Endpoint struct {
	// ID is the node's ID.
	ID uint64
	// Transport sends this node's messages.
	Transport node.Transport
	// Received delivers the messages that reached this node, in arrival
	// order. The suite reads it; the implementation must buffer enough
	// (or drop, as a network would) never to block its own goroutines.
	Received <-chan raft.Message
}

// Pair is two connected endpoints, and a way to kill the second.
type Pair struct {
	A, B Endpoint
	// StopB makes B unreachable for good, as a crashed machine: it stops
	// reading, and its connections go away.
	StopB func()
}

// waitMax bounds every wait: generous, because a loaded CI machine is slow;
// no test passes or fails on timing within it.
const waitMax = 20 * time.Second

// Run runs the suite. newPair is called once per test and must return two
// endpoints that can reach each other (or will, soon: the suite waits).
func Run(t *testing.T, newPair func(t *testing.T) Pair) {
	tests := []struct {
		name string
		fn   func(*testing.T, Pair)
	}{
		{"EveryTypeIntact", testEveryType},
		{"InOrder", testInOrder},
		{"LargeSnapshot", testLargeSnapshot},
		{"UnknownPeerNeverBlocks", testUnknownPeer},
		{"DeadPeerNeverBlocks", testDeadPeer},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.fn(t, newPair(t)) })
	}
}

// Messages returns one message of every type from one node to another,
// with every field the type uses set.
func Messages(from, to uint64) []raft.Message {
	return []raft.Message{
		{Type: raft.MsgVoteRequest, From: from, To: to, Term: 3, LogIndex: 10, LogTerm: 2, Transfer: true},
		{Type: raft.MsgVoteResponse, From: from, To: to, Term: 3, Reject: true},
		{Type: raft.MsgPreVoteRequest, From: from, To: to, Term: 4, LogIndex: 10, LogTerm: 2},
		{Type: raft.MsgPreVoteResponse, From: from, To: to, Term: 4},
		{Type: raft.MsgAppendRequest, From: from, To: to, Term: 3, LogIndex: 10, LogTerm: 2, Commit: 9, Entries: []raft.Entry{
			{Term: 3, Index: 11, Type: raft.EntryNormal, Data: []byte("hello")},
			{Term: 3, Index: 12, Type: raft.EntryConfChange, Data: []byte{1, 2, 3}},
			{Term: 3, Index: 13},
		}},
		{Type: raft.MsgAppendResponse, From: from, To: to, Term: 3, LogIndex: 7, Reject: true, HintIndex: 5, HintTerm: 1},
		{Type: raft.MsgHeartbeatRequest, From: from, To: to, Term: 3, Commit: 9, ReadRound: 77},
		{Type: raft.MsgHeartbeatResponse, From: from, To: to, Term: 3, ReadRound: 77},
		{Type: raft.MsgSnapshotRequest, From: from, To: to, Term: 3, Snapshot: raft.Snapshot{
			Metadata: raft.SnapshotMetadata{Index: 20, Term: 3, ConfState: raft.ConfState{Voters: []uint64{1, 2, 3}, Learners: []uint64{4}}},
			Data:     []byte("state")}},
		{Type: raft.MsgSnapshotResponse, From: from, To: to, Term: 3, LogIndex: 20},
		{Type: raft.MsgTimeoutNow, From: from, To: to, Term: 3},
	}
}

// receive collects n messages from e, or fails the test.
func receive(t *testing.T, e Endpoint, n int) []raft.Message {
	t.Helper()
	var got []raft.Message
	deadline := time.After(waitMax)
	for len(got) < n {
		select {
		case m := <-e.Received:
			got = append(got, m)
		case <-deadline:
			t.Fatalf("node %d received %d of %d messages", e.ID, len(got), n)
		}
	}
	return got
}

// sendUntil resends probe until one arrives at e: a fresh transport may
// drop messages until its connection is up, as a network may.
func sendUntil(t *testing.T, from, to Endpoint) {
	t.Helper()
	probe := raft.Message{Type: raft.MsgHeartbeatRequest, From: from.ID, To: to.ID, Term: 1, ReadRound: 1 << 40}
	deadline := time.Now().Add(waitMax)
	for time.Now().Before(deadline) {
		from.Transport.Send([]raft.Message{probe})
		select {
		case m := <-to.Received:
			if m.ReadRound == probe.ReadRound {
				// Drain other probes still in flight.
				for {
					select {
					case <-to.Received:
					case <-time.After(50 * time.Millisecond):
						return
					}
				}
			}
		case <-time.After(20 * time.Millisecond):
		}
	}
	t.Fatalf("no message from %d reached %d", from.ID, to.ID)
}

func testEveryType(t *testing.T, p Pair) {
	sendUntil(t, p.A, p.B)
	sendUntil(t, p.B, p.A)
	for _, dir := range []struct{ from, to Endpoint }{{p.A, p.B}, {p.B, p.A}} {
		want := Messages(dir.from.ID, dir.to.ID)
		dir.from.Transport.Send(want)
		got := receive(t, dir.to, len(want))
		// Snapshots may travel apart from the other messages (streamed
		// in chunks, say): compare without order.
		byType := func(a, b raft.Message) int { return int(a.Type) - int(b.Type) }
		slices.SortStableFunc(got, byType)
		slices.SortStableFunc(want, byType)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%d->%d:\n got %v\nwant %v", dir.from.ID, dir.to.ID, got, want)
		}
	}
}

func testInOrder(t *testing.T, p Pair) {
	sendUntil(t, p.A, p.B)
	const n = 1000
	for i := range n {
		p.A.Transport.Send([]raft.Message{{Type: raft.MsgAppendRequest, From: p.A.ID, To: p.B.ID, Term: 1, LogIndex: uint64(i)}})
	}
	for i, m := range receive(t, p.B, n) {
		if m.LogIndex != uint64(i) {
			t.Fatalf("message %d carries index %d: reordered or lost", i, m.LogIndex)
		}
	}
}

func testLargeSnapshot(t *testing.T, p Pair) {
	sendUntil(t, p.A, p.B)
	data := bytes.Repeat([]byte("0123456789abcdef"), 256<<10) // 4 MiB
	snap := raft.Message{Type: raft.MsgSnapshotRequest, From: p.A.ID, To: p.B.ID, Term: 2,
		Snapshot: raft.Snapshot{Metadata: raft.SnapshotMetadata{Index: 99, Term: 2, ConfState: raft.ConfState{Voters: []uint64{p.A.ID, p.B.ID}}}, Data: data}}
	p.A.Transport.Send([]raft.Message{snap})
	got := receive(t, p.B, 1)[0]
	if !reflect.DeepEqual(got, snap) {
		t.Fatalf("snapshot arrived altered: %d bytes at index %d", len(got.Snapshot.Data), got.Snapshot.Metadata.Index)
	}
}

// sendsReturn checks that many sends return within the bound.
func sendsReturn(t *testing.T, e Endpoint, to uint64) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		m := raft.Message{Type: raft.MsgAppendRequest, From: e.ID, To: to, Term: 1,
			Entries: []raft.Entry{{Term: 1, Index: 1, Data: make([]byte, 4096)}}}
		for range 50_000 { // 200 MB offered: more than any buffer holds
			e.Transport.Send([]raft.Message{m})
		}
	}()
	select {
	case <-done:
	case <-time.After(waitMax):
		t.Fatalf("Send to node %d blocked", to)
	}
}

func testUnknownPeer(t *testing.T, p Pair) { sendsReturn(t, p.A, 99) }

func testDeadPeer(t *testing.T, p Pair) {
	sendUntil(t, p.A, p.B)
	p.StopB()
	sendsReturn(t, p.A, p.B.ID)
}
