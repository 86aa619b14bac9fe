package pki

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
)

// MinVersion is the TLS version coord speaks: 1.3 only, on every port.
const MinVersion = tls.VersionTLS13

// NodeOf returns the node id the verified peer certificate of a
// connection names. Use it on connections made with PeerConfigs.
func NodeOf(cs tls.ConnectionState) (uint64, error) {
	if len(cs.PeerCertificates) == 0 {
		return 0, fmt.Errorf("%w: the peer presented no certificate", ErrIdentity)
	}
	id, err := IdentityOf(cs.PeerCertificates[0])
	if err != nil {
		return 0, err
	}
	if id.Node == 0 {
		return 0, fmt.Errorf("%w: %s is not a node", ErrIdentity, id)
	}
	return id.Node, nil
}

// PeerConfigs returns the TLS configurations of a node's peer transport:
// server accepts peers, client dials them. Both ends present src's
// certificate and require the other's (mutual TLS 1.3), verify it against
// src's CA bundle (as it is when the connection is made: reloads apply to
// new connections), and refuse a certificate that does not name a node
// of cluster, closing the connection in the handshake. Which node it
// must be is the transport's check (NodeOf), since only it knows whom
// it dialed or what a hello claims.
//
// Peer certificates are checked by their identity URI, not by host name:
// nodes reach each other through addresses (proxies, NAT) their
// certificates need not name.
func PeerConfigs(src *Source, cluster string) (server, client *tls.Config) {
	verify := func(cs tls.ConnectionState, usage x509.ExtKeyUsage) error {
		if err := verifyChain(cs, src.Roots(), "", usage); err != nil {
			return err
		}
		return checkPeer(cs, cluster)
	}
	server = &tls.Config{
		MinVersion: MinVersion,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			cert := src.Certificate()
			return &tls.Config{
				MinVersion:   MinVersion,
				Certificates: []tls.Certificate{*cert},
				// The chain is verified in VerifyConnection, against the
				// bundle as it is now, with the same code as the dialer's.
				ClientAuth: tls.RequireAnyClientCert,
				VerifyConnection: func(cs tls.ConnectionState) error {
					return verify(cs, x509.ExtKeyUsageClientAuth)
				},
			}, nil
		},
	}
	client = &tls.Config{
		MinVersion: MinVersion,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return src.Certificate(), nil
		},
		// Host names are not checked (see above); the chain and the
		// identity are, in VerifyConnection.
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			return verify(cs, x509.ExtKeyUsageServerAuth)
		},
	}
	return server, client
}

// checkPeer refuses a certificate that names no node, or a node of
// another cluster.
func checkPeer(cs tls.ConnectionState, cluster string) error {
	id, err := IdentityOf(cs.PeerCertificates[0])
	if err != nil {
		return err
	}
	switch {
	case id.Cluster != cluster:
		return fmt.Errorf("%w: certificate of %s, another cluster than %q", ErrIdentity, id, cluster)
	case id.Node == 0:
		return fmt.Errorf("%w: certificate of %s, which is not a node", ErrIdentity, id)
	}
	return nil
}

// verifyChain verifies the peer's certificate chain against roots, for
// usage, and for host if not empty.
func verifyChain(cs tls.ConnectionState, roots *x509.CertPool, host string, usage x509.ExtKeyUsage) error {
	if len(cs.PeerCertificates) == 0 {
		return fmt.Errorf("%w: no certificate presented", ErrIdentity)
	}
	if roots == nil {
		return fmt.Errorf("%w: no CA bundle to verify the peer against", ErrInvalid)
	}
	opts := x509.VerifyOptions{Roots: roots, Intermediates: x509.NewCertPool(), DNSName: host,
		KeyUsages: []x509.ExtKeyUsage{usage}}
	for _, c := range cs.PeerCertificates[1:] {
		opts.Intermediates.AddCert(c)
	}
	_, err := cs.PeerCertificates[0].Verify(opts)
	return err
}

// ServerConfig returns the TLS configuration of the HTTPS API: it serves
// src's certificate, and, if clientCAs is not nil, requires every client
// to present a certificate that chains to clientCAs' bundle
// (--client-cert-auth).
func ServerConfig(src *Source, clientCAs *Source) *tls.Config {
	return &tls.Config{
		MinVersion: MinVersion,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			c := &tls.Config{
				MinVersion:   MinVersion,
				Certificates: []tls.Certificate{*src.Certificate()},
				NextProtos:   []string{"http/1.1"},
			}
			if clientCAs != nil {
				c.ClientAuth, c.ClientCAs = tls.RequireAndVerifyClientCert, clientCAs.Roots()
			}
			return c, nil
		},
	}
}

// ClientConfig returns the TLS configuration of an HTTPS client: it
// verifies servers against src's CA bundle and their host name, and
// presents src's certificate if it has one (for servers that require
// client certificates). The bundle is the one loaded now; the
// certificate follows reloads.
func ClientConfig(src *Source) *tls.Config {
	c := &tls.Config{MinVersion: MinVersion, RootCAs: src.Roots()}
	if src.Certificate() != nil {
		c.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return src.Certificate(), nil
		}
	}
	return c
}

// Dialer returns a DialTLSContext for an http.Transport that makes each
// connection with ClientConfig(src) as it is at that moment, so that a
// long-lived client (a node forwarding to its leader) follows reloads of
// the CA bundle too.
func Dialer(src *Source) func(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		c := ClientConfig(src)
		c.ServerName = host
		raw, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		tc := tls.Client(raw, c)
		if err := tc.HandshakeContext(ctx); err != nil {
			raw.Close()
			return nil, err
		}
		return tc, nil
	}
}

// LoadClientConfig reads the files of a client (a CA bundle, and a
// certificate and key if the server requires one) and returns its TLS
// configuration. caFile may be empty to use the system's roots.
func LoadClientConfig(caFile, certFile, keyFile string) (*tls.Config, error) {
	if caFile == "" && certFile == "" && keyFile == "" {
		return &tls.Config{MinVersion: MinVersion}, nil
	}
	if caFile == "" {
		c := &tls.Config{MinVersion: MinVersion}
		src, err := NewSource(Files{Cert: certFile, Key: keyFile}, SourceOptions{})
		if err != nil {
			return nil, err
		}
		c.Certificates = []tls.Certificate{*src.Certificate()}
		return c, nil
	}
	src, err := NewSource(Files{Cert: certFile, Key: keyFile, CA: caFile}, SourceOptions{})
	if err != nil {
		return nil, err
	}
	return ClientConfig(src), nil
}
