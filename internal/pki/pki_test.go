package pki

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestIdentityURIsRoundTrip(t *testing.T) {
	for _, id := range []Identity{NodeIdentity("c1", 3), ClientIdentity("prod-eu", "admin")} {
		got, err := parseIdentity(id.URI())
		if err != nil || got != id {
			t.Fatalf("%v: parsed %+v, %v", id, got, err)
		}
	}
	if s := NodeIdentity("c1", 3).String(); s != "coord://c1/node/3" {
		t.Fatalf("node URI %q", s)
	}
}

func TestMalformedIdentitiesAreRefused(t *testing.T) {
	for _, raw := range []string{
		"coord://c1/node/0", "coord://c1/node/-1", "coord://c1/node/03", "coord://c1/node/x",
		"coord://c1/nodes/3", "coord://c1/node", "coord://c1/node/3/4", "coord://C1/node/3",
		"coord:///node/3", "coord://c1:99/node/3", "coord://u@c1/node/3", "coord://c1/node/3?x=1",
		"coord://c1/client/", "coord://c1/client/Admin",
	} {
		u, err := url.Parse(raw)
		if err != nil {
			continue
		}
		if id, err := parseIdentity(u); !errors.Is(err, ErrIdentity) {
			t.Errorf("%s: parsed %+v, %v; want ErrIdentity", raw, id, err)
		}
	}
}

// pkiDir is one cluster's CA and certificates in a temporary directory.
type pkiDir struct {
	t       *testing.T
	dir     string
	cluster string
	ca      *CA
}

func newPKI(t *testing.T, cluster string) *pkiDir {
	t.Helper()
	ca, err := NewCA(cluster, time.Now(), 0)
	if err != nil {
		t.Fatal(err)
	}
	p := &pkiDir{t: t, dir: t.TempDir(), cluster: cluster, ca: ca}
	if err := ca.Save(p.path("ca.crt"), p.path("ca.key")); err != nil {
		t.Fatal(err)
	}
	return p
}

func (p *pkiDir) path(name string) string { return filepath.Join(p.dir, name) }

// issue writes name.crt and name.key for req and returns their Files,
// with the CA bundle.
func (p *pkiDir) issue(name string, req Request) Files {
	p.t.Helper()
	c, err := p.ca.Issue(req, time.Now())
	if err != nil {
		p.t.Fatal(err)
	}
	f := Files{Cert: p.path(name + ".crt"), Key: p.path(name + ".key"), CA: p.path("ca.crt")}
	if err := c.Save(f.Cert, f.Key); err != nil {
		p.t.Fatal(err)
	}
	return f
}

func (p *pkiDir) node(id uint64) Files {
	return p.issue(fmt.Sprintf("node-%d", id), Request{Identity: NodeIdentity(p.cluster, id),
		Hosts: []string{"127.0.0.1", "localhost"}, Server: true, Client: true})
}

func source(t *testing.T, f Files, opts SourceOptions) *Source {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	s, err := NewSource(f, opts)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestFilesAreWrittenPrivate(t *testing.T) {
	p := newPKI(t, "c1")
	f := p.node(1)
	for _, name := range []string{f.Cert, f.Key, p.path("ca.key")} {
		st, err := os.Stat(name)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v, want 0600", name, st.Mode().Perm())
		}
	}
	ca, err := LoadCA(p.path("ca.crt"), p.path("ca.key"))
	if err != nil || !ca.Cert.Equal(p.ca.Cert) {
		t.Fatalf("LoadCA: %v", err)
	}
}

// handshake runs a TLS handshake between server and client configs over
// loopback and returns both sides' errors and the server's view.
func handshake(t *testing.T, server, client *tls.Config) (serverErr, clientErr error, cs tls.ConnectionState) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		c, err := l.Accept()
		if err != nil {
			serverErr = err
			return
		}
		defer c.Close()
		tc := tls.Server(c, server)
		_ = tc.SetDeadline(time.Now().Add(10 * time.Second))
		serverErr = tc.Handshake()
		cs = tc.ConnectionState()
		if serverErr == nil {
			_, _ = tc.Write([]byte("x")) // completes the client's view in TLS 1.3
		}
	}()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	tc := tls.Client(c, client)
	_ = tc.SetDeadline(time.Now().Add(10 * time.Second))
	clientErr = tc.Handshake()
	if clientErr == nil {
		// In TLS 1.3 the client finishes before the server has checked
		// the client's certificate: a read sees the server's verdict.
		_, clientErr = tc.Read(make([]byte, 1))
	}
	tc.Close()
	wg.Wait()
	return serverErr, clientErr, cs
}

// attacker is a dialer that presents f's certificate and trusts anyone.
func attacker(t *testing.T, f Files) *tls.Config {
	t.Helper()
	pair, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{pair}, InsecureSkipVerify: true}
}

func TestPeerTLSAcceptsNodesOfTheClusterOnly(t *testing.T) {
	p := newPKI(t, "c1")
	n1, n2 := source(t, p.node(1), SourceOptions{VerifyOwn: true}), source(t, p.node(2), SourceOptions{VerifyOwn: true})
	srv, _ := PeerConfigs(n1, "c1")
	_, cli := PeerConfigs(n2, "c1")
	serr, cerr, cs := handshake(t, srv, cli)
	if serr != nil || cerr != nil {
		t.Fatalf("two nodes of one cluster: server %v, client %v", serr, cerr)
	}
	if id, err := NodeOf(cs); err != nil || id != 2 {
		t.Fatalf("server sees node %d, %v; want 2", id, err)
	}
	if cs.Version != tls.VersionTLS13 {
		t.Fatalf("version %x, want TLS 1.3", cs.Version)
	}

	// A client certificate of the same CA: refused on the peer port.
	clientFiles := p.issue("client", Request{Identity: ClientIdentity("c1", "admin"), Client: true})
	asClient := attacker(t, clientFiles)
	if serr, _, _ := handshake(t, srv, asClient); !errors.Is(serr, ErrIdentity) || !strings.Contains(serr.Error(), "not a node") {
		t.Errorf("client certificate on the peer port: server %v", serr)
	}
	// A node of another cluster under the same CA.
	other := p.issue("other", Request{Identity: NodeIdentity("c2", 2), Server: true, Client: true})
	asOther := attacker(t, other)
	if serr, _, _ := handshake(t, srv, asOther); !errors.Is(serr, ErrIdentity) || !strings.Contains(serr.Error(), "another cluster") {
		t.Errorf("other cluster's node: server %v", serr)
	}
	// A node certificate from another CA, naming the right cluster.
	q := newPKI(t, "c1")
	asForeign := attacker(t, q.node(2))
	if serr, _, _ := handshake(t, srv, asForeign); serr == nil || !strings.Contains(serr.Error(), "unknown authority") {
		t.Errorf("another CA's node certificate: server %v", serr)
	}
	// No certificate at all.
	if serr, _, _ := handshake(t, srv, &tls.Config{MinVersion: tls.VersionTLS13, InsecureSkipVerify: true}); serr == nil {
		t.Error("a client without a certificate was accepted")
	}
	// The dialer checks the acceptor the same way.
	srvForeign, _ := PeerConfigs(source(t, q.node(1), SourceOptions{}), "c1")
	if _, cerr, _ := handshake(t, srvForeign, cli); cerr == nil {
		t.Error("dialer accepted an acceptor of another CA")
	}
	// TLS 1.2 is refused.
	old := cli.Clone()
	old.MaxVersion = tls.VersionTLS12
	if serr, _, _ := handshake(t, srv, old); serr == nil {
		t.Error("TLS 1.2 accepted")
	}
}

func TestHTTPSVerifiesHostsAndClientCertificates(t *testing.T) {
	p := newPKI(t, "c1")
	node := source(t, p.node(1), SourceOptions{})
	clientFiles := p.issue("client", Request{Identity: ClientIdentity("c1", "admin"), Client: true})
	withCert, err := LoadClientConfig(clientFiles.CA, clientFiles.Cert, clientFiles.Key)
	if err != nil {
		t.Fatal(err)
	}
	withCert.ServerName = "127.0.0.1"
	caOnly, err := LoadClientConfig(p.path("ca.crt"), "", "")
	if err != nil {
		t.Fatal(err)
	}
	caOnly.ServerName = "127.0.0.1"
	if serr, cerr, _ := handshake(t, ServerConfig(node, nil), caOnly); serr != nil || cerr != nil {
		t.Fatalf("server without client auth: %v, %v", serr, cerr)
	}
	caOnly.ServerName = "coord.example.com"
	if _, cerr, _ := handshake(t, ServerConfig(node, nil), caOnly); cerr == nil {
		t.Fatal("a host the certificate does not name was accepted")
	}
	clientCAs := source(t, Files{CA: p.path("ca.crt")}, SourceOptions{})
	caOnly.ServerName = "127.0.0.1"
	if serr, _, _ := handshake(t, ServerConfig(node, clientCAs), caOnly); serr == nil {
		t.Fatal("--client-cert-auth accepted a client without a certificate")
	}
	if serr, cerr, _ := handshake(t, ServerConfig(node, clientCAs), withCert); serr != nil || cerr != nil {
		t.Fatalf("client certificate: %v, %v", serr, cerr)
	}
}

func TestReloadKeepsTheOldCertificateOnBadFiles(t *testing.T) {
	p := newPKI(t, "c1")
	f := p.node(1)
	same := func(leaf *x509.Certificate) error {
		if id, err := IdentityOf(leaf); err != nil || id != NodeIdentity("c1", 1) {
			return errors.New("not node 1")
		}
		return nil
	}
	s := source(t, f, SourceOptions{VerifyOwn: true, Check: same})
	first := s.Leaf().SerialNumber
	// A key that does not match the certificate (a rotation half done).
	other := p.issue("node-2", Request{Identity: NodeIdentity("c1", 1), Server: true, Client: true})
	b, _ := os.ReadFile(other.Key)
	if err := WriteFile(f.Key, b); err != nil {
		t.Fatal(err)
	}
	if err := s.Reload(); err == nil {
		t.Fatal("mismatched key accepted")
	}
	if s.Leaf().SerialNumber.Cmp(first) != 0 {
		t.Fatal("a failed reload changed the certificate")
	}
	// The matching certificate: accepted.
	b, _ = os.ReadFile(other.Cert)
	if err := WriteFile(f.Cert, b); err != nil {
		t.Fatal(err)
	}
	if err := s.Reload(); err != nil {
		t.Fatal(err)
	}
	if s.Leaf().SerialNumber.Cmp(first) == 0 {
		t.Fatal("reload kept the old certificate")
	}
	// A certificate of another node: refused by Check.
	n3 := p.node(3)
	for _, pair := range [][2]string{{n3.Cert, f.Cert}, {n3.Key, f.Key}} {
		b, _ := os.ReadFile(pair[0])
		if err := WriteFile(pair[1], b); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Reload(); err == nil || !strings.Contains(err.Error(), "not node 1") {
		t.Fatalf("another node's certificate: %v", err)
	}
	// From another CA: refused by VerifyOwn.
	q := newPKI(t, "c1")
	foreign := q.node(1)
	for _, pair := range [][2]string{{foreign.Cert, f.Cert}, {foreign.Key, f.Key}} {
		b, _ := os.ReadFile(pair[0])
		if err := WriteFile(pair[1], b); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Reload(); err == nil || !strings.Contains(err.Error(), "not issued by the CA") {
		t.Fatalf("another CA's certificate: %v", err)
	}
}

func TestExpiredCertificatesAreRefused(t *testing.T) {
	p := newPKI(t, "c1")
	f := p.node(1)
	later := func() time.Time { return time.Now().Add(2 * ValidityDefault) }
	if _, err := NewSource(f, SourceOptions{Now: later}); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "not now") {
		t.Fatalf("expired certificate: %v", err)
	}
}

// syncBuffer is a log destination tests can read while it is written.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func TestWatchReloadsChangedFiles(t *testing.T) {
	p := newPKI(t, "c1")
	f := p.node(1)
	s := source(t, f, SourceOptions{})
	first := s.Leaf().SerialNumber
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Watch(ctx) }()
	defer func() {
		cancel()
		<-done
	}()
	// The watcher is set up asynchronously: rewrite until it sees one.
	deadline := time.Now().Add(30 * time.Second)
	for s.Leaf().SerialNumber.Cmp(first) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the certificate was never reloaded after its files changed")
		}
		c, err := p.ca.Issue(Request{Identity: NodeIdentity("c1", 1), Server: true, Client: true}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Save(f.Cert, f.Key); err != nil {
			t.Fatal(err)
		}
		time.Sleep(3 * watchSettle) // polling the reload: no event to wait on
	}
}
