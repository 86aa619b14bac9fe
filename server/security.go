package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"coord/apiwire"
	"coord/internal/pki"
	"coord/transport/tcp"

	"github.com/spf13/pflag"
)

// Security is a node's TLS and tokens: mutual TLS between nodes, HTTPS
// for the API, bearer tokens checked on every request. A Config without
// one runs insecure: plain TCP and HTTP, and no tokens.
type Security struct {
	// Peer is the node's peer certificate and key and the CA bundle its
	// peers' certificates must chain to (--peer-cert-file,
	// --peer-key-file, --peer-trusted-ca-file). The certificate names
	// this node and its cluster (internal/pki).
	Peer *pki.Source
	// HTTP is the API's certificate and key (--cert-file, --key-file).
	HTTP *pki.Source
	// ClientCAs, if set, makes the API require client certificates that
	// chain to its bundle (--trusted-ca-file with --client-cert-auth).
	ClientCAs *pki.Source
	// Forward is what a node presents and trusts when it forwards a
	// request to the leader's API: its peer certificate (a node's, so
	// valid for client authentication), and the CA bundle of
	// --trusted-ca-file, or of --peer-trusted-ca-file without one.
	Forward *pki.Source
	// InitialAdminToken, if set, is the hash of the token the leader of a
	// cluster that never had a token makes its first admin token
	// (--initial-admin-token-file).
	InitialAdminToken *[TokenHashBytes]byte
}

// Cluster returns the cluster id the node's peer certificate names.
func (s *Security) Cluster() string {
	id, _ := pki.IdentityOf(s.Peer.Leaf()) // checked when loaded
	return id.Cluster
}

// peerTLS is the transport's TLS configuration.
func (s *Security) peerTLS() *tcp.TLSConfig {
	server, client := pki.PeerConfigs(s.Peer, s.Cluster())
	return &tcp.TLSConfig{Server: server, Client: client, PeerID: pki.NodeOf}
}

// sources returns every certificate source, for reloads.
func (s *Security) sources() []*pki.Source {
	out := []*pki.Source{s.Peer, s.HTTP, s.Forward}
	if s.ClientCAs != nil {
		out = append(out, s.ClientCAs)
	}
	return out
}

// Reload reloads every certificate and CA file. A source whose files are
// bad keeps what it had; the error names the first.
func (s *Security) Reload() error {
	var first error
	for _, src := range s.sources() {
		if err := src.Reload(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// watch reloads the certificates on SIGHUP and when their files change,
// until ctx ends.
func (s *Security) watch(ctx context.Context, log *slog.Logger) {
	for _, src := range s.sources() {
		go func() {
			if err := src.Watch(ctx); err != nil {
				log.Warn("certificate files are not watched; reload with SIGHUP", "err", err)
			}
		}()
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		defer signal.Stop(hup)
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				log.Info("SIGHUP: reloading certificates")
				_ = s.Reload() // each failure is logged by its source
			}
		}
	}()
}

// SecurityOptions are the command-line settings of a node's TLS and
// tokens, named as etcd names its own.
type SecurityOptions struct {
	Insecure          bool
	PeerCertFile      string
	PeerKeyFile       string
	PeerTrustedCAFile string
	CertFile          string
	KeyFile           string
	TrustedCAFile     string
	ClientCertAuth    bool
	InitialAdminToken string
}

// Register defines the flags of SecurityOptions on fs.
func (o *SecurityOptions) Register(fs *pflag.FlagSet) {
	fs.BoolVar(&o.Insecure, "insecure", false, "run without TLS and without tokens: anyone who reaches a port may act as any node or client (tests on loopback only)")
	fs.StringVar(&o.PeerCertFile, "peer-cert-file", "", "this node's peer certificate (PEM), naming coord://CLUSTER/node/ID")
	fs.StringVar(&o.PeerKeyFile, "peer-key-file", "", "the peer certificate's private key (PEM)")
	fs.StringVar(&o.PeerTrustedCAFile, "peer-trusted-ca-file", "", "CA bundle that peers' certificates must chain to (PEM)")
	fs.StringVar(&o.CertFile, "cert-file", "", "the HTTPS API's certificate (PEM)")
	fs.StringVar(&o.KeyFile, "key-file", "", "the HTTPS API certificate's private key (PEM)")
	fs.StringVar(&o.TrustedCAFile, "trusted-ca-file", "", "CA bundle for client certificates (with --client-cert-auth) and the leader's HTTPS certificate when forwarding (default: --peer-trusted-ca-file)")
	fs.BoolVar(&o.ClientCertAuth, "client-cert-auth", false, "require API clients to present a certificate that chains to --trusted-ca-file (tokens are still required)")
	fs.StringVar(&o.InitialAdminToken, "initial-admin-token-file", "", "file holding the token that becomes the first admin token of a new cluster (only its SHA-256 is kept)")
}

// Load returns the Security the options describe for node id, or nil
// with --insecure. Errors about the flags wrap ErrInvalid; errors about
// the files do not.
func (o SecurityOptions) Load(id uint64, logger *slog.Logger) (*Security, error) {
	named := map[string]string{
		"--peer-cert-file": o.PeerCertFile, "--peer-key-file": o.PeerKeyFile, "--peer-trusted-ca-file": o.PeerTrustedCAFile,
		"--cert-file": o.CertFile, "--key-file": o.KeyFile, "--trusted-ca-file": o.TrustedCAFile,
		"--initial-admin-token-file": o.InitialAdminToken,
	}
	if o.Insecure {
		for flag, v := range named {
			if v != "" {
				return nil, fmt.Errorf("%w: --insecure with %s: choose TLS or no TLS", ErrInvalid, flag)
			}
		}
		if o.ClientCertAuth {
			return nil, fmt.Errorf("%w: --insecure with --client-cert-auth: choose TLS or no TLS", ErrInvalid)
		}
		return nil, nil
	}
	var missing []string
	for _, flag := range []string{"--peer-cert-file", "--peer-key-file", "--peer-trusted-ca-file", "--cert-file", "--key-file"} {
		if named[flag] == "" {
			missing = append(missing, flag)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("%w: coord server runs with TLS unless told --insecure: %s not set (coord cluster up makes them; see docs/security.md)",
			ErrInvalid, strings.Join(missing, ", "))
	}
	if o.ClientCertAuth && o.TrustedCAFile == "" {
		return nil, fmt.Errorf("%w: --client-cert-auth needs --trusted-ca-file", ErrInvalid)
	}
	opts := pki.SourceOptions{Logger: logger}
	var s Security
	var err error
	peerOpts := opts
	peerOpts.VerifyOwn = true
	var cluster string
	peerOpts.Check = func(leaf *x509.Certificate) error {
		pid, err := pki.IdentityOf(leaf)
		switch {
		case err != nil:
			return err
		case pid.Node != id:
			return fmt.Errorf("%w: it names %s, and this is node %d", pki.ErrIdentity, pid, id)
		case cluster != "" && pid.Cluster != cluster:
			return fmt.Errorf("%w: it names cluster %q, and this node is of %q", pki.ErrIdentity, pid.Cluster, cluster)
		}
		cluster = pid.Cluster
		return nil
	}
	if s.Peer, err = pki.NewSource(pki.Files{Cert: o.PeerCertFile, Key: o.PeerKeyFile, CA: o.PeerTrustedCAFile}, peerOpts); err != nil {
		return nil, fmt.Errorf("server: peer TLS: %w", err)
	}
	if s.HTTP, err = pki.NewSource(pki.Files{Cert: o.CertFile, Key: o.KeyFile}, opts); err != nil {
		return nil, fmt.Errorf("server: API TLS: %w", err)
	}
	if o.ClientCertAuth {
		if s.ClientCAs, err = pki.NewSource(pki.Files{CA: o.TrustedCAFile}, opts); err != nil {
			return nil, fmt.Errorf("server: client CA: %w", err)
		}
	}
	forwardCA := o.TrustedCAFile
	if forwardCA == "" {
		forwardCA = o.PeerTrustedCAFile
	}
	if s.Forward, err = pki.NewSource(pki.Files{Cert: o.PeerCertFile, Key: o.PeerKeyFile, CA: forwardCA}, opts); err != nil {
		return nil, fmt.Errorf("server: forwarding TLS: %w", err)
	}
	if o.InitialAdminToken != "" {
		b, err := os.ReadFile(o.InitialAdminToken)
		if err != nil {
			return nil, fmt.Errorf("server: initial admin token: %w", err)
		}
		secret := strings.TrimSpace(string(b))
		if len(secret) < 32 {
			return nil, fmt.Errorf("%w: the token in %s is %d characters: want at least 32 (coord cluster up makes one)", ErrInvalid, o.InitialAdminToken, len(secret))
		}
		h := HashToken(secret)
		s.InitialAdminToken = &h
	}
	return &s, nil
}

// listenHTTP listens for the API: over TLS when the node is secure,
// offering HTTP/2 in ALPN if http2 and wire if wire (listenWire sorts
// the connections); in clear with HTTP/2, reading through a buffer.
func listenHTTP(addr string, sec *Security, http2, wire bool) (net.Listener, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("server: listen http %s: %w", addr, err)
	}
	if sec == nil {
		if http2 && !wire {
			// With wire, the listener that sorts wire from HTTP hands
			// the HTTP connections on through the buffer it read them
			// with: one buffer, not two.
			return bufferedListener{l}, nil
		}
		return l, nil
	}
	c := offerHTTP2(pki.ServerConfig(sec.HTTP, sec.ClientCAs), http2)
	if wire {
		c = offerWire(c)
	}
	return tls.NewListener(l, c), nil
}

// offerHTTP2 makes c, a configuration whose GetConfigForClient returns
// the one each handshake uses (pki.ServerConfig), offer "h2" before
// "http/1.1" in ALPN if http2; the http.Server serves the connections
// that choose it over HTTP/2 (apiProtocols).
func offerHTTP2(c *tls.Config, http2 bool) *tls.Config {
	if !http2 {
		return c
	}
	inner := c.GetConfigForClient
	c.GetConfigForClient = func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
		hc, err := inner(hello)
		if hc != nil {
			hc.NextProtos = []string{"h2", "http/1.1"}
		}
		return hc, err
	}
	return c
}

// forwardIdleConns bounds the idle connections a follower keeps to the
// leader for forwarding: a quarter of a node's connection limit
// (DefaultHTTPLimits), so that three followers stay within it.
const forwardIdleConns = 1024

// apiSecurity fills in the API's token checks and its client for
// forwarding to the leader: over HTTPS when secure. Both modes pool the
// same number of connections, so that a comparison of the two measures
// TLS and tokens, not connection reuse. The pool keeps up to
// forwardIdleConns connections to the leader: one per request in flight,
// so that a follower serving hundreds of clients does not close (and, over
// TLS, handshake again) all but a few after each burst.
func apiSecurity(cfg *APIConfig, sec *Security) {
	tr := &http.Transport{MaxIdleConnsPerHost: forwardIdleConns, IdleConnTimeout: 30 * time.Second}
	cfg.Client = &http.Client{Transport: tr}
	if sec == nil {
		return
	}
	cfg.Auth, cfg.ForwardScheme = true, "https"
	tr.DialTLSContext = pki.Dialer(sec.Forward)
}

// bootstrapTokens proposes the initial admin token while this node leads a
// cluster that never had a token, one proposal at a time; a later leader
// tries again if this one fails. The machine adds it only if the cluster
// never had a token, so a token revoked is never brought back.
func (n *Node) bootstrapTokens() {
	sec := n.cfg.Security
	if sec == nil || sec.InitialAdminToken == nil || !n.bootstrapping.CompareAndSwap(false, true) {
		return
	}
	n.sm.mu.RLock()
	done := n.sm.machine.TokensEver()
	n.sm.mu.RUnlock()
	if done {
		n.bootstrapping.Store(false)
		return
	}
	go func() {
		defer n.bootstrapping.Store(false)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		cmd := TokenBootstrapCommand(Token{Hash: *sec.InitialAdminToken, Role: TokenAdmin, Name: "initial admin"})
		if _, err := n.shell.Propose(ctx, cmd.Marshal()); err != nil {
			n.log.Debug("propose the initial admin token", "err", err)
			return
		}
		n.log.Info("initial admin token proposed")
	}()
}

// bufferedListener hands out connections whose reads go through a buffer.
// net/http's HTTP/2 server reads each frame's 9-byte header and then its
// payload straight from the connection: over TLS those reads come from the
// record already decrypted, but in clear (h2c) each is a read system call,
// two or more per request. A buffer makes it one read for everything the
// client has sent. HTTP/1.1 connections read through a buffer of their own
// already; this one costs them a copy, and every connection 4 KiB more
// (a watch's connection costs about 24 KiB: docs/API.md).
type bufferedListener struct{ net.Listener }

func (l bufferedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return apiwire.NewBufferedConn(c, 4<<10), nil
}
