package tcp

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"coord/raft"
)

var rewrite = flag.Bool("rewrite", false, "rewrite the fuzz seed corpus in testdata")

func TestMessageRoundTrip(t *testing.T) {
	msgs := append(sampleMessages(1, 2), raft.Message{Type: raft.MsgSnapshotResponse, From: 2, To: 1, Term: 1,
		Snapshot: raft.Snapshot{Metadata: raft.SnapshotMetadata{Index: 5, Term: 1,
			ConfState: raft.ConfState{Voters: []uint64{1, 2}, VotersOutgoing: []uint64{1, 2, 3}}}}})
	for _, m := range msgs {
		got, err := unmarshalMessage(marshalMessage(m))
		if err != nil || !reflect.DeepEqual(got, m) {
			t.Fatalf("round trip of %v: got %v, %v", m, got, err)
		}
	}
}

// A message frame encoded in place (appendMessageFrame, the leader's
// appends) is the frame of its encoding, after whatever the buffer held,
// and reads back as the message; its encoding allocates nothing once the
// buffer has room.
func TestMessageFrameInPlace(t *testing.T) {
	msgs := append(sampleMessages(1, 2), followerPathMessages(1, 2)...)
	msgs = append(msgs, raft.Message{Type: raft.MsgAppendRequest, From: 1, To: 2, Term: 3, LogIndex: 7, LogTerm: 3, Commit: 7,
		Entries: []raft.Entry{{Term: 3, Index: 8, Data: bytes.Repeat([]byte{9}, 300)}, {Term: 3, Index: 9, Data: []byte("put b")}}})
	var want []byte
	buf := []byte("before")
	for _, m := range msgs {
		want = appendFrame(want, frameMessage, marshalMessage(m))
		buf = appendMessageFrame(buf, m)
	}
	if !bytes.HasPrefix(buf, []byte("before")) || !bytes.Equal(buf[len("before"):], want) {
		t.Fatalf("in place: %x\nwant: %x", buf, want)
	}
	got, err := decodeStream(buf[len("before"):])
	if err != io.EOF || !reflect.DeepEqual(got, msgs) { // EOF: the stream's end
		t.Fatalf("decoded %v, %v; want %v", got, err, msgs)
	}
	if raceEnabled {
		return // the race detector's allocations
	}
	last := msgs[len(msgs)-1]
	if n := testing.AllocsPerRun(100, func() { buf = appendMessageFrame(buf[:0], last) }); n != 0 {
		t.Fatalf("an append's frame in a buffer with room: %v allocations, want 0", n)
	}
}

// A follower's forwarded proposals (type 14) round-trip; one without
// proposals, or with a membership change among them, does not decode.
func TestProposalRequestCodec(t *testing.T) {
	m := raft.Message{Type: raft.MsgProposalRequest, From: 2, To: 1, Term: 4, ReadRound: 9, Entries: []raft.Entry{
		{Type: raft.EntryNormal, Data: []byte("put a")}, {Type: raft.EntryNormal, Data: bytes.Repeat([]byte{7}, 300)}}}
	b := marshalMessage(m)
	if b[0] != 14 {
		t.Fatalf("MsgProposalRequest encodes as type %d, want 14 (the wire format)", b[0])
	}
	got, err := unmarshalMessage(b)
	if err != nil || !reflect.DeepEqual(got, m) {
		t.Fatalf("round trip of %v: got %v, %v", m, got, err)
	}
	for name, bad := range map[string]raft.Message{
		"no proposals": {Type: raft.MsgProposalRequest, From: 2, To: 1, Term: 4},
		"membership": {Type: raft.MsgProposalRequest, From: 2, To: 1, Term: 4, Entries: []raft.Entry{
			{Type: raft.EntryNormal, Data: []byte("x")}, {Type: raft.EntryConfChange, Data: []byte{1}}}},
	} {
		if _, err := unmarshalMessage(marshalMessage(bad)); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: err %v, want ErrMalformed", name, err)
		}
	}
}

// The read index messages (types 12 and 13) and the answer to forwarded
// proposals (15) travel in the ordinary message frame: their bytes are
// pinned here, so that a change of the encoding is
// a decision, not an accident.
func TestReadIndexMessagesEncoding(t *testing.T) {
	for _, tt := range []struct {
		m   raft.Message
		hex string
	}{
		{raft.Message{Type: raft.MsgReadIndexRequest, From: 2, To: 1, Term: 3, ReadRound: 300}, "0c020103000000000000ac020000000000000000"},
		{raft.Message{Type: raft.MsgReadIndexResponse, From: 1, To: 2, Term: 3, LogIndex: 17, ReadRound: 300}, "0d010203110000000000ac020000000000000000"},
		{raft.Message{Type: raft.MsgReadIndexResponse, From: 1, To: 2, Term: 3, Reject: true, ReadRound: 300}, "0d010203000000010000ac020000000000000000"},
		{raft.Message{Type: raft.MsgProposalResponse, From: 1, To: 2, Term: 3, LogIndex: 17, LogTerm: 3, ReadRound: 300}, "0f010203110300000000ac020000000000000000"},
		{raft.Message{Type: raft.MsgProposalResponse, From: 1, To: 2, Term: 3, Reject: true, ReadRound: 300, Lead: 4}, "0f010203000000010000ac020004000000000000"},
	} {
		b := marshalMessage(tt.m)
		if got := fmt.Sprintf("%x", b); got != tt.hex {
			t.Errorf("%v encodes as %s, want %s", tt.m, got, tt.hex)
		}
		got, err := unmarshalMessage(b)
		if err != nil || !reflect.DeepEqual(got, tt.m) {
			t.Errorf("round trip of %v: got %v, %v", tt.m, got, err)
		}
	}
}

func TestDecodeRejectsBadInput(t *testing.T) {
	good := marshalMessage(sampleMessages(1, 2)[1])
	for name, b := range map[string][]byte{
		"empty":        nil,
		"type 0":       append([]byte{0}, good[1:]...),
		"type 200":     append([]byte{200}, good[1:]...),
		"truncated":    good[:len(good)-3],
		"trailing":     append(bytes.Clone(good), 7),
		"no sender":    marshalMessage(raft.Message{Type: raft.MsgHeartbeatRequest, To: 1}),
		"entry count":  {byte(raft.MsgAppendRequest), 1, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0x7f},
		"entry type 9": marshalMessage(raft.Message{Type: raft.MsgAppendRequest, From: 1, To: 2, Entries: []raft.Entry{{Type: 9}}}),
	} {
		if _, err := unmarshalMessage(b); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: err %v, want ErrMalformed", name, err)
		}
	}
	for name, frame := range map[string][]byte{
		"zero length": {0, 0, 0, 0},
		"too long":    {0xff, 0xff, 0xff, 0xff},
		"bad crc":     flipLast(appendFrame(nil, frameMessage, good)),
	} {
		if _, _, err := readFrame(bytes.NewReader(frame), 1<<20); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: err %v, want ErrMalformed", name, err)
		}
	}
}

func flipLast(b []byte) []byte {
	b[len(b)-1] ^= 1
	return b
}

// decodeStream decodes a connection's byte stream the way read does, up to
// the first error. It is what the fuzzer drives.
func decodeStream(data []byte) ([]raft.Message, error) {
	r := bytes.NewReader(data)
	var out []raft.Message
	for {
		typ, payload, err := readFrame(r, 1<<20)
		if err != nil {
			return out, err
		}
		switch typ {
		case frameHello, frameHelloAck:
			if _, err := unmarshalHello(payload); err != nil {
				return out, err
			}
		case frameMessage:
			m, err := unmarshalMessage(payload)
			if err != nil {
				return out, err
			}
			out = append(out, m)
		case frameSnapshotBegin:
			m, _, err := unmarshalSnapshotBegin(payload, 1<<20)
			if err != nil {
				return out, err
			}
			out = append(out, m)
		}
	}
}

func seedStreams() [][]byte {
	var seeds [][]byte
	var all []byte
	all = appendFrame(all, frameHello, hello{Version: 1, From: 1, To: 2, Meta: "127.0.0.1:8080"}.marshal())
	for _, m := range append(sampleMessages(1, 2), followerPathMessages(1, 2)...) {
		f := appendFrame(nil, frameMessage, marshalMessage(m))
		seeds = append(seeds, f)
		all = append(all, f...)
	}
	snap := raft.Message{Type: raft.MsgSnapshotRequest, From: 1, To: 2, Snapshot: raft.Snapshot{
		Metadata: raft.SnapshotMetadata{Index: 3, Term: 1, ConfState: raft.ConfState{Voters: []uint64{1, 2, 3}}}, Data: []byte("abc")}}
	all = appendFrame(all, frameSnapshotBegin, marshalSnapshotBegin(snap, snap.Snapshot.Size()))
	all = appendFrame(all, frameSnapshotChunk, []byte{1, 'a', 'b', 'c'})
	return append(seeds, all)
}

// followerPathMessages are the messages of follower reads and forwarded
// proposals (types 12 to 15), seeds of the fuzzer's corpus beside
// sampleMessages.
func followerPathMessages(from, to uint64) []raft.Message {
	return []raft.Message{
		{Type: raft.MsgReadIndexRequest, From: from, To: to, Term: 3, ReadRound: 1 << 61},
		{Type: raft.MsgReadIndexResponse, From: from, To: to, Term: 3, LogIndex: 12, ReadRound: 1<<61 + 1},
		{Type: raft.MsgReadIndexResponse, From: from, To: to, Term: 4, Reject: true, ReadRound: 1<<61 + 2},
		{Type: raft.MsgProposalRequest, From: from, To: to, Term: 3, ReadRound: 1<<61 + 3, Entries: []raft.Entry{
			{Type: raft.EntryNormal, Data: []byte("put a")}, {Type: raft.EntryNormal, Data: []byte{0, 1, 2, 255}}}},
		{Type: raft.MsgProposalResponse, From: from, To: to, Term: 3, LogIndex: 13, LogTerm: 3, ReadRound: 1<<61 + 3},
		{Type: raft.MsgProposalResponse, From: from, To: to, Term: 4, Reject: true, Lead: 3, ReadRound: 1<<61 + 4},
	}
}

// FuzzDecode feeds arbitrary bytes to the frame and message decoders: they
// must never panic, and what decodes must re-encode to the same message.
func FuzzDecode(f *testing.F) {
	for _, s := range seedStreams() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		msgs, _ := decodeStream(data)
		for _, m := range msgs {
			again, err := unmarshalMessage(marshalMessage(m))
			if err != nil || !reflect.DeepEqual(again, m) {
				t.Fatalf("re-decode of %v: %v, %v", m, again, err)
			}
		}
	})
}

// TestSeedCorpus keeps testdata/fuzz/FuzzDecode in step with the encoder:
// go test -run TestSeedCorpus -rewrite regenerates it.
func TestSeedCorpus(t *testing.T) {
	dir := filepath.Join("testdata", "fuzz", "FuzzDecode")
	seeds := seedStreams()
	if *rewrite {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for i, s := range seeds {
			body := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", s)
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("seed-%02d", i)), []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) < len(seeds) {
		t.Fatalf("seed corpus in %s: %d files, %v; run with -rewrite", dir, len(entries), err)
	}
	for i, s := range seeds {
		if _, err := decodeStream(s); err != nil && !errors.Is(err, io.EOF) {
			t.Fatalf("seed %d does not decode: %v", i, err)
		}
	}
}
