package tcp

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"coord/internal/faultproxy"
	"coord/raft"
)

// TestConcurrentSendsKeepEachSendersOrder has sender 0 send alone, one
// small message at a time (written directly: nothing is queued), then four
// goroutines send to the same peer at once, each its own numbered
// sequence, small messages (written directly when nothing is queued)
// mixed with messages over DirectWriteMaxBytes (always queued): every
// message arrives, and each sender's in the order it sent them, whichever
// path each took.
func TestConcurrentSendsKeepEachSendersOrder(t *testing.T) {
	var dropped atomic.Int64
	a, b := startPair(t, func(c *Config) {
		c.QueueMessages = 1 << 15
		c.Dropped = func(string) { dropped.Add(1) }
	})
	waitConnected(t, a, 2)
	const alone, senders, perSender = 50, 4, 2000
	large := make([]byte, a.cfg.DirectWriteMaxBytes+1)
	message := func(sender, i int) raft.Message {
		m := raft.Message{Type: raft.MsgAppendRequest, From: 1, To: 2, Term: 1, Commit: uint64(sender), LogIndex: uint64(i)}
		if i >= alone && i%7 == 3 {
			m.Entries = []raft.Entry{{Term: 1, Index: uint64(i), Data: large}}
		}
		return m
	}
	for i := range alone {
		a.Send([]raft.Message{message(0, i)})
		b.in.waitFor(t, i+1)
	}
	var wg sync.WaitGroup
	for s := range senders {
		wg.Go(func() {
			for i := range perSender {
				if s == 0 {
					i += alone
				}
				a.Send([]raft.Message{message(s, i)})
			}
		})
	}
	wg.Wait()
	total := alone + senders*perSender
	got := b.in.waitFor(t, total)
	if dropped.Load() != 0 {
		t.Fatalf("%d messages dropped on a healthy link", dropped.Load())
	}
	next := make([]uint64, senders)
	for _, m := range got {
		if m.LogIndex != next[m.Commit] {
			t.Fatalf("sender %d: message %d arrived where %d was due: reordered or lost", m.Commit, m.LogIndex, next[m.Commit])
		}
		next[m.Commit]++
	}
	// The messages sent alone went directly: all but those sent before
	// the writer took the new connection up, or just after a queued one
	// (the writer counts it written after its flush, which may be after
	// it arrived).
	direct := a.directMessages.Load()
	if directWrites && direct == 0 {
		t.Fatalf("none of %d messages written directly", total)
	}
	t.Logf("%d of %d messages written directly", direct, total)
}

// TestDirectWritesDisabled: with DirectWriteMaxBytes 0 every message goes
// through the queue, as before direct writes existed.
func TestDirectWritesDisabled(t *testing.T) {
	a, b := startPair(t, func(c *Config) { c.DirectWriteMaxBytes = 0 })
	waitConnected(t, a, 2)
	a.Send(sampleMessages(1, 2))
	b.in.waitFor(t, len(sampleMessages(1, 2)))
	if n := a.directMessages.Load(); n != 0 {
		t.Fatalf("%d messages written directly with direct writes off", n)
	}
}

// TestDirectWritesNeverWaitForAStalledPeer partitions a connected pair
// (the proxy holds the bytes, as TCP does across a partition) and sends
// small messages, each one a direct write while nothing is queued: the
// socket buffers fill, a direct write leaves what the socket does not
// take to the writer goroutine, and from then on messages queue and,
// once the queue is full, are dropped. No Send waits, though the write
// timeout (30 s) is longer than the whole test may take. When the
// partition heals, every message not dropped arrives intact and in order:
// the carried bytes went first. With and without TLS.
func TestDirectWritesNeverWaitForAStalledPeer(t *testing.T) {
	if !directWrites {
		t.Skip("no direct writes on " + runtime.GOOS)
	}
	for _, secure := range []bool{false, true} {
		name := "plain"
		if secure {
			name = "tls"
		}
		t.Run(name, func(t *testing.T) {
			var pki *testPKI
			if secure {
				pki = newTestPKI(t, "c1")
			}
			tlsOf := func(c *Config, id uint64) {
				if pki != nil {
					c.TLS = pki.peerTLS(id)
				}
			}
			l1, l2 := listen(t), listen(t)
			proxy, err := faultproxy.New(l2.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer proxy.Close()
			peers := map[uint64]string{1: l1.Addr().String(), 2: proxy.Addr()}
			var dropped atomic.Int64
			a := start(t, 1, l1, peers, func(c *Config) {
				c.QueueMessages = 256
				c.WriteTimeout = 30 * time.Second
				c.Dropped = func(string) { dropped.Add(1) }
				tlsOf(c, 1)
			})
			b := start(t, 2, l2, peers, func(c *Config) { tlsOf(c, 2) })
			waitConnected(t, a, 2)
			// One message through first: the connection carries data (over
			// TLS its handshake is done) before the partition, so that the
			// writes below meet full buffers, not a handshake that cannot
			// finish.
			data := make([]byte, 1<<10)
			a.Send([]raft.Message{{Type: raft.MsgAppendRequest, From: 1, To: 2, Term: 1, LogIndex: 0,
				Entries: []raft.Entry{{Term: 1, Index: 0, Data: data}}}})
			b.in.waitFor(t, 1)
			carriedBefore := a.directCarried.Load()
			proxy.Blackhole(true)
			// 1 KiB each, 40,000 of them: about 40 MiB offered, far more
			// than the socket buffers on either side of the proxy hold.
			const sent = 40_000
			done := make(chan struct{})
			go func() {
				defer close(done)
				for i := range sent {
					a.Send([]raft.Message{{Type: raft.MsgAppendRequest, From: 1, To: 2, Term: 1, LogIndex: uint64(i + 1),
						Entries: []raft.Entry{{Term: 1, Index: uint64(i + 1), Data: data}}}})
				}
			}()
			select {
			case <-done:
			case <-time.After(waitMax):
				t.Fatal("Send waited on a partitioned peer")
			}
			if a.directCarried.Load() == carriedBefore || dropped.Load() == 0 {
				t.Fatalf("carried %d (%d before the partition), dropped %d: the socket buffers never filled", a.directCarried.Load(), carriedBefore, dropped.Load())
			}
			proxy.Blackhole(false)
			want := 1 + sent - int(dropped.Load()) // the probe, and what was not dropped
			got := b.in.waitFor(t, want)
			if len(got) != want {
				t.Fatalf("got %d messages, want %d (%d sent, %d dropped)", len(got), want, sent, dropped.Load())
			}
			for i := 1; i < len(got); i++ {
				if got[i].LogIndex <= got[i-1].LogIndex || len(got[i].Entries) != 1 || len(got[i].Entries[0].Data) != len(data) {
					t.Fatalf("message %d (index %d) after index %d: reordered or damaged", i, got[i].LogIndex, got[i-1].LogIndex)
				}
			}
			t.Logf("%d direct messages, %d carried writes, %d dropped, %d arrived", a.directMessages.Load(), a.directCarried.Load(), dropped.Load(), len(got))
		})
	}
}

// TestDirectWriteAfterTheWriteDeadlinePassed: the writer goroutine leaves
// its last write deadline on the socket; a direct write made after that
// deadline passed (an idle spell longer than WriteTimeout) must still go
// out on the same connection, not fail as timed out and break it.
func TestDirectWriteAfterTheWriteDeadlinePassed(t *testing.T) {
	if !directWrites {
		t.Skip("no direct writes on " + runtime.GOOS)
	}
	var dropped atomic.Int64
	a, b := startPair(t, func(c *Config) { c.Dropped = func(string) { dropped.Add(1) } })
	waitConnected(t, a, 2)
	a.Send(sampleMessages(1, 2)[:1])
	b.in.waitFor(t, 1)
	p := a.peer(2)
	p.writing.Lock()
	c := p.cur
	if c == nil {
		p.writing.Unlock()
		t.Fatal("no connection in use after a message went through")
	}
	// As the writer leaves it, WriteTimeout later.
	_ = c.SetWriteDeadline(time.Now().Add(-time.Second))
	p.writing.Unlock()
	before := a.directMessages.Load()
	a.Send(sampleMessages(1, 2)[1:2])
	b.in.waitFor(t, 2)
	if a.directMessages.Load() != before+1 || dropped.Load() != 0 || isClosed(c) {
		t.Fatalf("direct messages %d -> %d, dropped %d, connection closed %v: the lapsed deadline failed the direct write",
			before, a.directMessages.Load(), dropped.Load(), isClosed(c))
	}
}
