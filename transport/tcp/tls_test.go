package tcp

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"testing"
	"time"

	"coord/internal/pki"
	"coord/raft"
	"coord/transport/transporttest"
)

// testPKI is a cluster's CA, with certificates issued on demand.
type testPKI struct {
	t       *testing.T
	dir     string
	cluster string
	ca      *pki.CA
}

func newTestPKI(t *testing.T, cluster string) *testPKI {
	t.Helper()
	ca, err := pki.NewCA(cluster, time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	p := &testPKI{t: t, dir: t.TempDir(), cluster: cluster, ca: ca}
	if err := pki.WriteFile(filepath.Join(p.dir, "ca.crt"), ca.CertPEM); err != nil {
		t.Fatal(err)
	}
	return p
}

// files issues a certificate for id and returns its files.
func (p *testPKI) files(name string, id pki.Identity) pki.Files {
	p.t.Helper()
	c, err := p.ca.Issue(pki.Request{Identity: id, Server: id.Node != 0, Client: true}, time.Now())
	if err != nil {
		p.t.Fatal(err)
	}
	f := pki.Files{Cert: filepath.Join(p.dir, name+".crt"), Key: filepath.Join(p.dir, name+".key"), CA: filepath.Join(p.dir, "ca.crt")}
	if err := c.Save(f.Cert, f.Key); err != nil {
		p.t.Fatal(err)
	}
	return f
}

// peerTLS is the transport TLS of node id of the PKI's cluster.
func (p *testPKI) peerTLS(id uint64) *TLSConfig {
	p.t.Helper()
	src, err := pki.NewSource(p.files(fmt.Sprintf("node-%d", id), pki.NodeIdentity(p.cluster, id)), pki.SourceOptions{VerifyOwn: true})
	if err != nil {
		p.t.Fatal(err)
	}
	server, client := pki.PeerConfigs(src, p.cluster)
	return &TLSConfig{Server: server, Client: client, PeerID: pki.NodeOf}
}

// dialerWith presents f's certificate and trusts any acceptor: an
// outsider holding that certificate.
func dialerWith(t *testing.T, f pki.Files) *tls.Config {
	t.Helper()
	c := &tls.Config{MinVersion: tls.VersionTLS13, InsecureSkipVerify: true}
	if f.Cert != "" {
		pair, err := tls.LoadX509KeyPair(f.Cert, f.Key)
		if err != nil {
			t.Fatal(err)
		}
		c.Certificates = []tls.Certificate{pair}
	}
	return c
}

func TestTLSMessagesArriveIntact(t *testing.T) {
	p := newTestPKI(t, "c1")
	l1, l2 := listen(t), listen(t)
	peers := map[uint64]string{1: l1.Addr().String(), 2: l2.Addr().String()}
	a := start(t, 1, l1, peers, func(c *Config) { c.TLS = p.peerTLS(1) })
	b := start(t, 2, l2, peers, func(c *Config) { c.TLS = p.peerTLS(2) })
	waitConnected(t, a, 2)
	want := sampleMessages(1, 2)
	a.Send(want)
	got := b.in.waitFor(t, len(want))
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("got %v\nwant %v", got, want)
	}
	b.Send(sampleMessages(2, 1))
	a.in.waitFor(t, len(want))
}

// forge tries, on a connection an outsider opened, a hello claiming node
// claimed, then a heartbeat and an append from that node at a high term:
// the outsider's attack on an insecure cluster.
func forge(c net.Conn, claimed, to uint64) {
	h := hello{Version: ProtocolVersion, From: claimed, To: to}
	_, _ = c.Write(appendFrame(nil, frameHello, h.marshal()))
	for _, m := range []raft.Message{
		{Type: raft.MsgHeartbeatRequest, From: claimed, To: to, Term: 1000, Commit: 5},
		{Type: raft.MsgAppendRequest, From: claimed, To: to, Term: 1000, LogIndex: 0, LogTerm: 0, Commit: 1,
			Entries: []raft.Entry{{Term: 1000, Index: 1, Data: []byte("outsider")}}},
	} {
		_, _ = c.Write(appendFrame(nil, frameMessage, marshalMessage(m)))
	}
}

// TestTLSRefusesOutsiders is the outsider's attacks on the peer port of a
// node of a TLS cluster (nodes 1 and 2 are peers): each connection is
// refused and logged with its reason, and nothing it sent is delivered.
func TestTLSRefusesOutsiders(t *testing.T) {
	p := newTestPKI(t, "c1")
	other := newTestPKI(t, "c1") // another CA, naming the same cluster id
	l1 := listen(t)
	peers := map[uint64]string{1: l1.Addr().String(), 2: "127.0.0.1:1", 3: "127.0.0.1:1"}
	a := start(t, 1, l1, peers, func(c *Config) { c.TLS = p.peerTLS(1) })
	addr := l1.Addr().String()

	tlsDial := func(conf *tls.Config) net.Conn {
		t.Helper()
		raw, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		c := tls.Client(raw, conf)
		_ = c.SetDeadline(time.Now().Add(waitMax))
		return c // the handshake happens on the first write
	}
	for _, tt := range []struct {
		name string
		dial func() net.Conn
		log  string
	}{
		{"plaintext hello", func() net.Conn {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			return c
		}, "reason=\"tls handshake\""},
		{"no certificate", func() net.Conn { return tlsDial(dialerWith(t, pki.Files{})) }, "client didn't provide a certificate"},
		{"another CA", func() net.Conn {
			return tlsDial(dialerWith(t, other.files("n2", pki.NodeIdentity("c1", 2))))
		}, "certificate signed by unknown authority"},
		{"a client certificate", func() net.Conn {
			return tlsDial(dialerWith(t, p.files("client", pki.ClientIdentity("c1", "admin"))))
		}, "which is not a node"},
		{"another cluster", func() net.Conn {
			return tlsDial(dialerWith(t, p.files("c2n2", pki.NodeIdentity("c2", 2))))
		}, "another cluster"},
		{"node 3 claiming to be node 2", func() net.Conn {
			return tlsDial(dialerWith(t, p.files("n3", pki.NodeIdentity("c1", 3))))
		}, "hello claims another node than its certificate names"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := tt.dial()
			forge(c, 2, 1)
			expectClosed(t, c)
			a.log.waitFor(t, tt.log)
		})
	}
	if n := a.in.len(); n != 0 {
		t.Fatalf("%d forged messages were delivered", n)
	}
	if _, connected := a.PeerMeta(2); connected {
		t.Fatal("an outsider's connection was adopted as node 2's")
	}
}

// TestTLSDialerRefusesAnImpostor: node 1 dials node 2's address, where
// node 3 (of the same cluster and CA) answers. The dialer sees that the
// certificate names another node, and refuses.
func TestTLSDialerRefusesAnImpostor(t *testing.T) {
	p := newTestPKI(t, "c1")
	l1, l3 := listen(t), listen(t)
	start(t, 3, l3, map[uint64]string{3: l3.Addr().String(), 1: l1.Addr().String()}, func(c *Config) { c.TLS = p.peerTLS(3) })
	a := start(t, 1, l1, map[uint64]string{2: l3.Addr().String()}, func(c *Config) { c.TLS = p.peerTLS(1) })
	a.log.waitFor(t, "dialed node 2, its certificate names node 3")
	if _, connected := a.PeerMeta(2); connected {
		t.Fatal("node 1 took node 3 for node 2")
	}
}

func TestTLSConformance(t *testing.T) {
	p := newTestPKI(t, "c1")
	transporttest.Run(t, func(t *testing.T) transporttest.Pair {
		l1, l2 := listen(t), listen(t)
		peers := map[uint64]string{1: l1.Addr().String(), 2: l2.Addr().String()}
		ends := make([]transporttest.Endpoint, 2)
		var trs []*Transport
		for i, l := range []net.Listener{l1, l2} {
			ch := make(chan raft.Message, 1<<16)
			cfg := DefaultConfig()
			cfg.ID, cfg.Listener, cfg.Peers = uint64(i+1), l, peers
			cfg.TLS = p.peerTLS(uint64(i + 1))
			cfg.Logger = slog.New(slog.DiscardHandler)
			cfg.Deliver = func(m raft.Message) {
				select {
				case ch <- m:
				default:
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
