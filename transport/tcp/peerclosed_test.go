package tcp

import (
	"net"
	"testing"
	"time"

	"coord/internal/faultproxy"
	"coord/raft"
)

// closeReports collects the PeerClosed reports of one transport.
type closeReports chan uint64

func newCloseReports() closeReports { return make(closeReports, 64) }

func (c closeReports) record(id uint64) { c <- id }

// expect waits for a report of peer id.
func (c closeReports) expect(t *testing.T, id uint64) {
	t.Helper()
	select {
	case got := <-c:
		if got != id {
			t.Fatalf("PeerClosed(%d), want PeerClosed(%d)", got, id)
		}
	case <-time.After(waitMax):
		t.Fatalf("no PeerClosed(%d)", id)
	}
}

// none checks that nothing was reported so far.
func (c closeReports) none(t *testing.T, why string) {
	t.Helper()
	select {
	case got := <-c:
		t.Fatalf("PeerClosed(%d) after %s, want none", got, why)
	default:
	}
}

// When a peer's end closes the connection (its process exits, and the
// kernel closes its sockets), this end is told; the end that closed is
// not. With and without TLS: a TLS connection closed under its records
// reads as an EOF too.
func TestPeerClosedWhenTheOtherEndCloses(t *testing.T) {
	for _, secure := range []bool{false, true} {
		name := "plain"
		if secure {
			name = "tls"
		}
		t.Run(name, func(t *testing.T) {
			p := newTestPKI(t, "c1")
			ra, rb := newCloseReports(), newCloseReports()
			l1, l2 := listen(t), listen(t)
			peers := map[uint64]string{1: l1.Addr().String(), 2: l2.Addr().String()}
			tweak := func(id uint64, r closeReports) func(*Config) {
				return func(c *Config) {
					c.PeerClosed = r.record
					if secure {
						c.TLS = p.peerTLS(id)
					}
				}
			}
			a := start(t, 1, l1, peers, tweak(1, ra))
			b := start(t, 2, l2, peers, tweak(2, rb))
			waitConnected(t, a, 2)
			waitConnected(t, b, 1)
			b.Close()
			ra.expect(t, 2)
			rb.none(t, "closing itself")
		})
	}
}

// A reset (a proxy cutting the connection) is told to both ends: each
// sees the other's end close. A node cannot tell it from its peer's
// death; that is why the core takes it as a hint only.
func TestPeerClosedOnAReset(t *testing.T) {
	l1, l2 := listen(t), listen(t)
	proxy, err := faultproxy.New(l2.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	peers := map[uint64]string{1: l1.Addr().String(), 2: proxy.Addr()}
	ra, rb := newCloseReports(), newCloseReports()
	a := start(t, 1, l1, peers, func(c *Config) { c.PeerClosed = ra.record })
	b := start(t, 2, l2, peers, func(c *Config) { c.PeerClosed = rb.record })
	waitConnected(t, a, 2)
	waitConnected(t, b, 1)
	proxy.Cut()
	ra.expect(t, 2)
	rb.expect(t, 1)
}

// Nothing is told when this end gives the connection up: a write that
// timed out on a stalled peer, or a frame it refused.
func TestPeerClosedNotOnTimeoutsOrRefusedFrames(t *testing.T) {
	l1, l2 := listen(t), listen(t)
	proxy, err := faultproxy.New(l2.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	peers := map[uint64]string{1: l1.Addr().String(), 2: proxy.Addr()}
	ra := newCloseReports()
	a := start(t, 1, l1, peers, func(c *Config) {
		c.PeerClosed = ra.record
		c.WriteTimeout = 200 * time.Millisecond
	})
	start(t, 2, l2, peers, nil)
	waitConnected(t, a, 2)
	proxy.Blackhole(true)
	big := raft.Message{Type: raft.MsgAppendRequest, From: 1, To: 2, Term: 1,
		Entries: []raft.Entry{{Term: 1, Index: 1, Data: make([]byte, 64<<10)}}}
	for range 2000 { // far more than the socket buffers hold: the writer times out
		a.Send([]raft.Message{big})
	}
	a.log.waitFor(t, "write failed")
	a.log.waitFor(t, "i/o timeout")
	// The connection is forgotten after PeerClosed would have been told;
	// the blackhole keeps a new one from completing its handshake.
	waitPeerState(t, a.Transport, 2, false)
	ra.none(t, "a write timeout")

	// A known peer's connection whose frame fails its checksum: refused
	// by this end, not closed by the peer.
	l3 := listen(t)
	r3 := newCloseReports()
	c := start(t, 3, l3, map[uint64]string{4: "127.0.0.1:1"}, func(c *Config) { c.PeerClosed = r3.record })
	conn := rawHello(t, l3.Addr().String(), hello{Version: ProtocolVersion, From: 4, To: 3})
	defer conn.Close()
	if _, _, err := readFrame(conn, 4096); err != nil {
		t.Fatalf("no hello ack: %v", err)
	}
	frame := appendFrame(nil, frameMessage, marshalMessage(sampleMessages(4, 3)[0]))
	frame[len(frame)-1] ^= 0xff
	if _, err := conn.Write(frame); err != nil {
		t.Fatal(err)
	}
	expectClosed(t, conn) // closed after PeerClosed would have been told
	c.log.waitFor(t, "checksum mismatch")
	r3.none(t, "a refused frame")
}

// Closing the transport tells nothing, whatever its connections' readers
// meet on the way out.
func TestPeerClosedNotOnClose(t *testing.T) {
	ra := newCloseReports()
	l1, l2 := listen(t), listen(t)
	peers := map[uint64]string{1: l1.Addr().String(), 2: l2.Addr().String()}
	a := start(t, 1, l1, peers, func(c *Config) { c.PeerClosed = ra.record })
	b := start(t, 2, l2, peers, nil)
	waitConnected(t, a, 2)
	waitConnected(t, b, 1)
	if err := a.Close(); err != nil && !isClosedListener(err) {
		t.Fatal(err)
	}
	ra.none(t, "Close")
}

func isClosedListener(err error) bool {
	ne, ok := err.(*net.OpError)
	return ok && ne.Op == "close"
}
