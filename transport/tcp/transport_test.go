package tcp

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"coord/internal/faultproxy"
	"coord/raft"
	"coord/transport/transporttest"
)

const waitMax = 20 * time.Second

// inbox collects delivered messages.
type inbox struct {
	mu   sync.Mutex
	msgs []raft.Message
	more chan struct{}
}

func newInbox() *inbox { return &inbox{more: make(chan struct{}, 1)} }

func (b *inbox) deliver(m raft.Message) {
	b.mu.Lock()
	b.msgs = append(b.msgs, m)
	b.mu.Unlock()
	select {
	case b.more <- struct{}{}:
	default:
	}
}

func (b *inbox) len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.msgs)
}

// waitFor waits until at least n messages arrived and returns them.
func (b *inbox) waitFor(t testing.TB, n int) []raft.Message {
	t.Helper()
	deadline := time.After(waitMax)
	for {
		b.mu.Lock()
		if len(b.msgs) >= n {
			got := append([]raft.Message(nil), b.msgs...)
			b.mu.Unlock()
			return got
		}
		b.mu.Unlock()
		select {
		case <-b.more:
		case <-deadline:
			t.Fatalf("got %d messages, want %d", len(b.msgs), n)
		}
	}
}

// logBuffer is a slog destination tests can search.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) waitFor(t *testing.T, text string) {
	t.Helper()
	deadline := time.Now().Add(waitMax)
	for time.Now().Before(deadline) {
		l.mu.Lock()
		found := strings.Contains(l.buf.String(), text)
		l.mu.Unlock()
		if found {
			return
		}
		time.Sleep(5 * time.Millisecond) // polling a log: no channel to wait on
	}
	t.Fatalf("log never said %q:\n%s", text, l.buf.String())
}

func listen(t testing.TB) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return l
}

type node struct {
	*Transport
	in  *inbox
	log *logBuffer
}

func start(t testing.TB, id uint64, l net.Listener, peers map[uint64]string, tweak func(*Config)) *node {
	t.Helper()
	n := &node{in: newInbox(), log: &logBuffer{}}
	cfg := DefaultConfig()
	cfg.ID, cfg.Listener, cfg.Peers, cfg.Deliver = id, l, peers, n.in.deliver
	cfg.Meta = fmt.Sprintf("http-of-%d", id)
	cfg.Logger = slog.New(slog.NewTextHandler(n.log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	if tweak != nil {
		tweak(&cfg)
	}
	tr, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	n.Transport = tr
	t.Cleanup(func() { tr.Close() })
	return n
}

// startPair starts nodes 1 and 2 connected to each other.
func startPair(t testing.TB, tweak func(*Config)) (*node, *node) {
	l1, l2 := listen(t), listen(t)
	peers := map[uint64]string{1: l1.Addr().String(), 2: l2.Addr().String()}
	return start(t, 1, l1, peers, tweak), start(t, 2, l2, peers, tweak)
}

func sampleMessages(from, to uint64) []raft.Message {
	return []raft.Message{
		{Type: raft.MsgVoteRequest, From: from, To: to, Term: 3, LogIndex: 10, LogTerm: 2, Transfer: true},
		{Type: raft.MsgAppendRequest, From: from, To: to, Term: 3, LogIndex: 10, LogTerm: 2, Commit: 9, Entries: []raft.Entry{
			{Term: 3, Index: 11, Type: raft.EntryNormal, Data: []byte("hello")},
			{Term: 3, Index: 12, Type: raft.EntryConfChange, Data: []byte{1, 2, 3}},
			{Term: 3, Index: 13},
		}},
		{Type: raft.MsgAppendResponse, From: from, To: to, Term: 3, LogIndex: 7, Reject: true, HintIndex: 5, HintTerm: 1},
		{Type: raft.MsgHeartbeatRequest, From: from, To: to, Term: 3, Commit: 9, ReadRound: 77},
		{Type: raft.MsgTimeoutNow, From: from, To: to, Term: 3},
	}
}

// waitConnected waits until a's connection to peer is up.
func waitConnected(t testing.TB, a *node, peer uint64) {
	t.Helper()
	waitPeerState(t, a.Transport, peer, true)
}

// waitPeerState waits until tr's connection to peer is up (connected) or
// down, looking again at each change it tells (PeersChanged).
func waitPeerState(t testing.TB, tr *Transport, peer uint64, connected bool) {
	t.Helper()
	deadline := time.After(waitMax)
	for {
		changed := tr.PeersChanged()
		if _, ok := tr.PeerMeta(peer); ok == connected {
			return
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("the connection to peer %d never became connected=%v", peer, connected)
		}
	}
}

func TestMessagesArriveIntactAndInOrder(t *testing.T) {
	a, b := startPair(t, nil)
	waitConnected(t, a, 2)
	waitConnected(t, b, 1)
	// Both directions share one connection.
	want12, want21 := sampleMessages(1, 2), sampleMessages(2, 1)
	a.Send(want12)
	b.Send(want21)
	if got := b.in.waitFor(t, len(want12)); !reflect.DeepEqual(got, want12) {
		t.Fatalf("1->2:\n got %v\nwant %v", got, want12)
	}
	if got := a.in.waitFor(t, len(want21)); !reflect.DeepEqual(got, want21) {
		t.Fatalf("2->1:\n got %v\nwant %v", got, want21)
	}
	if meta, _ := a.PeerMeta(2); meta != "http-of-2" {
		t.Fatalf("meta of 2: %q", meta)
	}
	if meta, _ := b.PeerMeta(1); meta != "http-of-1" {
		t.Fatalf("meta of 1: %q", meta)
	}
}

func TestPipelinedAppendsKeepOrder(t *testing.T) {
	a, b := startPair(t, nil)
	waitConnected(t, a, 2)
	const n = 2000
	for i := range n {
		a.Send([]raft.Message{{Type: raft.MsgAppendRequest, From: 1, To: 2, Term: 1, LogIndex: uint64(i)}})
	}
	got := b.in.waitFor(t, n)
	for i, m := range got {
		if m.LogIndex != uint64(i) {
			t.Fatalf("message %d has index %d: reordered or lost", i, m.LogIndex)
		}
	}
}

func TestSnapshotsStreamInChunks(t *testing.T) {
	reports := make(chan string, 10)
	a, b := startPair(t, func(c *Config) {
		c.SnapshotChunkBytes = 1000
		c.SnapshotDone = func(id uint64, failed bool) { reports <- fmt.Sprint(id, failed) }
	})
	waitConnected(t, a, 2)
	data := bytes.Repeat([]byte("snapshot-"), 5000) // 45 chunks
	snap := raft.Message{Type: raft.MsgSnapshotRequest, From: 1, To: 2, Term: 4, Snapshot: raft.Snapshot{
		Metadata: raft.SnapshotMetadata{Index: 100, Term: 4, ConfState: raft.ConfState{Voters: []uint64{1, 2, 3}, Learners: []uint64{4}}},
		Data:     data,
	}}
	a.Send([]raft.Message{snap})
	for i := range 50 {
		a.Send([]raft.Message{{Type: raft.MsgHeartbeatRequest, From: 1, To: 2, Term: 4, ReadRound: uint64(i + 1)}})
	}
	got := b.in.waitFor(t, 51)
	var gotSnap *raft.Message
	for i := range got {
		if got[i].Type == raft.MsgSnapshotRequest {
			gotSnap = &got[i]
		}
	}
	if gotSnap == nil || !reflect.DeepEqual(*gotSnap, snap) {
		t.Fatal("snapshot did not arrive intact")
	}
	// The sender reports after its last write returns, which may be after
	// the receiver has delivered the snapshot: wait for the report.
	select {
	case r := <-reports:
		if r != "2 false" {
			t.Fatalf("snapshot report %q, want a success for node 2", r)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no snapshot report")
	}
	select {
	case r := <-reports:
		t.Fatalf("a second snapshot report %q, want one", r)
	default:
	}
}

// TestSendToDeadPeerNeverBlocks is the articles' blocking-send deadlock,
// on a real network: a leader that keeps sending to a peer that is gone
// must carry on.
func TestSendToDeadPeerNeverBlocks(t *testing.T) {
	dead := listen(t)
	deadAddr := dead.Addr().String()
	dead.Close()
	var dropped, unreachable atomic.Int64
	l1 := listen(t)
	a := start(t, 1, l1, map[uint64]string{2: deadAddr}, func(c *Config) {
		c.QueueMessages = 16
		c.Dropped = func(string) { dropped.Add(1) }
		c.Unreachable = func(uint64) { unreachable.Add(1) }
	})
	done := make(chan struct{})
	go func() {
		for range 100_000 {
			a.Send([]raft.Message{{Type: raft.MsgHeartbeatRequest, From: 1, To: 2, Term: 1}})
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(waitMax):
		t.Fatal("Send blocked on a dead peer")
	}
	if dropped.Load() == 0 || unreachable.Load() == 0 {
		t.Fatalf("dropped %d, unreachable %d: drops were not reported", dropped.Load(), unreachable.Load())
	}
}

// TestSendToStalledPeerNeverBlocks puts a partition (a blackholing proxy)
// between two connected nodes: the sender's writes stop draining, and Send
// must still return at once.
func TestSendToStalledPeerNeverBlocks(t *testing.T) {
	l1, l2 := listen(t), listen(t)
	proxy, err := faultproxy.New(l2.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	peers := map[uint64]string{1: l1.Addr().String(), 2: proxy.Addr()}
	var dropped atomic.Int64
	a := start(t, 1, l1, peers, func(c *Config) {
		c.QueueMessages = 64
		c.WriteTimeout = 200 * time.Millisecond
		c.Dropped = func(string) { dropped.Add(1) }
	})
	b := start(t, 2, l2, peers, nil)
	waitConnected(t, a, 2)
	a.Send(sampleMessages(1, 2)[:1])
	b.in.waitFor(t, 1)
	proxy.Blackhole(true)
	big := raft.Message{Type: raft.MsgAppendRequest, From: 1, To: 2, Term: 1,
		Entries: []raft.Entry{{Term: 1, Index: 1, Data: make([]byte, 64<<10)}}}
	done := make(chan struct{})
	go func() {
		for range 2000 { // 128 MiB offered: far more than the socket buffers hold
			a.Send([]raft.Message{big})
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(waitMax):
		t.Fatal("Send blocked on a partitioned peer")
	}
	if dropped.Load() == 0 {
		t.Fatal("nothing dropped across a partition")
	}
	// Healed, the pair talks again (over a new connection if the writer
	// gave the stalled one up).
	proxy.Blackhole(false)
	before := len(b.in.waitFor(t, 1))
	deadline := time.Now().Add(waitMax)
	for len(b.in.waitFor(t, 1)) == before && time.Now().Before(deadline) {
		a.Send([]raft.Message{{Type: raft.MsgHeartbeatRequest, From: 1, To: 2, Term: 2}})
		time.Sleep(10 * time.Millisecond) // resend until the healed link carries one
	}
	if len(b.in.waitFor(t, 1)) == before {
		t.Fatal("no message got through after the partition healed")
	}
}

func TestReconnectsAfterPeerRestart(t *testing.T) {
	l1, l2 := listen(t), listen(t)
	addr2 := l2.Addr().String()
	peers := map[uint64]string{1: l1.Addr().String(), 2: addr2}
	a := start(t, 1, l1, peers, func(c *Config) { c.BackoffMax = 50 * time.Millisecond })
	b := start(t, 2, l2, peers, nil)
	waitConnected(t, a, 2)
	b.Close()
	// Node 2 comes back on the same address.
	l2b, err := net.Listen("tcp", addr2)
	if err != nil {
		t.Skipf("cannot rebind %s: %v", addr2, err)
	}
	b2 := start(t, 2, l2b, peers, nil)
	deadline := time.Now().Add(waitMax)
	for b2.in.len() == 0 && time.Now().Before(deadline) {
		a.Send([]raft.Message{{Type: raft.MsgHeartbeatRequest, From: 1, To: 2, Term: 1}})
		time.Sleep(10 * time.Millisecond) // resend until the new connection carries one
	}
	b2.in.waitFor(t, 1)
}

// rawHello dials addr and sends a hello; it returns the connection.
func rawHello(t *testing.T, addr string, h hello) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write(appendFrame(nil, frameHello, h.marshal())); err != nil {
		t.Fatal(err)
	}
	return c
}

// expectClosed checks that the peer closes c.
func expectClosed(t *testing.T, c net.Conn) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(waitMax))
	buf := make([]byte, 1024)
	for {
		if _, err := c.Read(buf); err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				t.Fatal("connection not closed")
			}
			return
		}
	}
}

func TestRejectsUnknownNodesAndMalformedFrames(t *testing.T) {
	l1 := listen(t)
	a := start(t, 1, l1, map[uint64]string{2: "127.0.0.1:1"}, nil)
	addr := l1.Addr().String()

	c := rawHello(t, addr, hello{Version: ProtocolVersion, From: 7, To: 1})
	expectClosed(t, c)
	a.log.waitFor(t, "unknown or removed node")

	c = rawHello(t, addr, hello{Version: ProtocolVersion, From: 2, To: 5})
	expectClosed(t, c)
	a.log.waitFor(t, "hello addressed to another node")

	c = rawHello(t, addr, hello{Version: 99, From: 2, To: 1})
	expectClosed(t, c)
	a.log.waitFor(t, "protocol version")

	// An older coord (protocol 1: no follower reads, no forwarded
	// proposals; protocol 2: forwarded proposals without answers) is
	// refused too, not mixed into the cluster.
	for _, old := range []uint64{1, 2} {
		c = rawHello(t, addr, hello{Version: old, From: 2, To: 1})
		expectClosed(t, c)
		a.log.waitFor(t, fmt.Sprintf("version=%d want=3", old))
	}

	// Not our protocol at all: an HTTP request on the raft port.
	c, _ = net.Dial("tcp", addr)
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	expectClosed(t, c)
	a.log.waitFor(t, "reading hello")

	// A known peer whose message claims another sender: dropped, logged.
	c = rawHello(t, addr, hello{Version: ProtocolVersion, From: 2, To: 1})
	if _, _, err := readFrame(c, 4096); err != nil {
		t.Fatalf("no hello ack: %v", err)
	}
	forged := raft.Message{Type: raft.MsgVoteRequest, From: 3, To: 1, Term: 9}
	c.Write(appendFrame(nil, frameMessage, marshalMessage(forged)))
	a.log.waitFor(t, "rejected message")
	// Then a frame with a bad checksum: the connection is closed.
	frame := appendFrame(nil, frameMessage, marshalMessage(sampleMessages(2, 1)[0]))
	frame[len(frame)-1] ^= 0xff
	c.Write(frame)
	expectClosed(t, c)
	a.log.waitFor(t, "checksum mismatch")
	if a.in.len() != 0 {
		t.Fatalf("delivered %d messages", a.in.len())
	}
}

func TestRemovedPeerIsCutOffAndRefused(t *testing.T) {
	a, b := startPair(t, nil)
	waitConnected(t, a, 2)
	b.RemovePeer(1)
	a.Send(sampleMessages(1, 2)[:1])
	// Node 1 keeps redialing; node 2 refuses it.
	b.log.waitFor(t, "unknown or removed node")
	if b.in.len() != 0 {
		t.Fatalf("a removed peer's %d messages were delivered", b.in.len())
	}
}

// A peer removed while its incoming connection is between the handshake
// and adoption is cut off: the connection is not adopted by the removed
// peer, where nothing would ever close it, and Close still returns.
func TestPeerRemovedDuringHandshakeIsCutOff(t *testing.T) {
	l1, l2 := listen(t), listen(t)
	peers := map[uint64]string{1: l1.Addr().String(), 2: l2.Addr().String()}
	reached, proceed := make(chan struct{}), make(chan struct{})
	var once sync.Once
	b := start(t, 2, l2, peers, func(c *Config) {
		c.beforeAdopt = func(from uint64) {
			once.Do(func() {
				close(reached)
				<-proceed
			})
		}
	})
	start(t, 1, l1, peers, nil) // node 1 dials node 2
	<-reached
	b.RemovePeer(1)
	close(proceed)
	b.log.waitFor(t, "node removed during the handshake")
	closed := make(chan struct{})
	go func() {
		b.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(waitMax):
		t.Fatal("Close did not return: a connection adopted by a removed peer is still being read")
	}
}

func TestConfigValidate(t *testing.T) {
	good := DefaultConfig()
	good.ID, good.ListenAddr, good.Deliver = 1, "127.0.0.1:0", func(raft.Message) {}
	for name, tweak := range map[string]func(*Config){
		"id":       func(c *Config) { c.ID = 0 },
		"listen":   func(c *Config) { c.ListenAddr = "" },
		"deliver":  func(c *Config) { c.Deliver = nil },
		"queue":    func(c *Config) { c.QueueMessages = 0 },
		"chunk":    func(c *Config) { c.SnapshotChunkBytes = c.MaxFrameBytes },
		"backoff":  func(c *Config) { c.BackoffMax = 0 },
		"peer":     func(c *Config) { c.Peers = map[uint64]string{2: ""} },
		"timeouts": func(c *Config) { c.WriteTimeout = 0 },
		"direct":   func(c *Config) { c.DirectWriteMaxBytes = -1 },
		"direct2":  func(c *Config) { c.DirectWriteMaxBytes = c.MaxFrameBytes + 1 },
	} {
		c := good
		tweak(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("%s: invalid config accepted", name)
		}
	}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestConformance(t *testing.T) {
	transporttest.Run(t, func(t *testing.T) transporttest.Pair {
		l1, l2 := listen(t), listen(t)
		peers := map[uint64]string{1: l1.Addr().String(), 2: l2.Addr().String()}
		ends := make([]transporttest.Endpoint, 2)
		var trs []*Transport
		for i, l := range []net.Listener{l1, l2} {
			ch := make(chan raft.Message, 1<<16)
			cfg := DefaultConfig()
			cfg.ID, cfg.Listener, cfg.Peers = uint64(i+1), l, peers
			cfg.Logger = slog.New(slog.DiscardHandler)
			cfg.Deliver = func(m raft.Message) {
				select {
				case ch <- m:
				default: // a full inbox drops, as the node shell's does
				}
			}
			tr, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { tr.Close() })
			trs = append(trs, tr)
			ends[i] = transporttest.Endpoint{ID: uint64(i + 1), Transport: tr, Received: ch}
		}
		return transporttest.Pair{A: ends[0], B: ends[1], StopB: func() { trs[1].Close() }}
	})
}

// A write many times larger than one slice goes through to a peer that
// reads slowly but steadily, though it takes several times WriteTimeout:
// the deadline is renewed for every slice (a single deadline for the whole
// write, as before, cut such a peer off mid-message; with 1 MB values a
// leader's appends were tens of MB and the cluster re-elected). A peer that
// stops reading is still cut off.
func TestWriteDeadlineJudgesProgressNotSize(t *testing.T) {
	const timeout = 2 * time.Second
	local, remote := net.Pipe()
	defer local.Close()
	defer remote.Close()
	pw := progressWriter{c: &conn{Conn: local}, timeout: timeout}
	data := bytes.Repeat([]byte("0123456789abcdef"), (16<<20)/16) // 16 MiB: 64 slices
	readDone := make(chan []byte)
	stopAfter := len(data) + WriteSliceBytes // bytes to read before stalling
	go func() {
		var got []byte
		buf := make([]byte, 64<<10)
		for len(got) < stopAfter {
			n, err := remote.Read(buf)
			if err != nil {
				break
			}
			got = append(got, buf[:n]...)
			// Pace the reader: 64 KiB every 20 ms at most, so the 16
			// MiB take over 5 s in all, more than twice the timeout,
			// and a slice of 256 KiB about 80 ms, a 25th of it (room
			// for a loaded machine and the race detector).
			time.Sleep(20 * time.Millisecond)
		}
		readDone <- got
	}()
	if n, err := pw.Write(data); err != nil || n != len(data) {
		t.Fatalf("write of %d bytes to a slow but steady reader: %d written, %v", len(data), n, err)
	}
	// The reader now stops after one more slice: the write after it times out.
	n, err := pw.Write(bytes.Repeat([]byte{1}, 4*WriteSliceBytes))
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("write to a reader that stopped: %d written, err %v, want a deadline error", n, err)
	}
	remote.Close()
	if got := <-readDone; !bytes.Equal(got[:len(data)], data) {
		t.Fatal("the bytes read differ from those written")
	}
}

// PeersChanged tells each change of what PeerMeta says of a peer's
// connection: it coming up, it going down when the peer's process closes
// it, and the peer's removal.
func TestPeersChangedTellsConnectionsComingAndGoing(t *testing.T) {
	a, b := startPair(t, nil)
	waitPeerState(t, a.Transport, 2, true)
	waitPeerState(t, b.Transport, 1, true)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	waitPeerState(t, a.Transport, 2, false)
	changed := a.PeersChanged()
	a.RemovePeer(2)
	select {
	case <-changed:
	case <-time.After(waitMax):
		t.Fatal("removing a peer did not close PeersChanged")
	}
}
