package leasekittest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"coord/lease"
)

// Rewrite returns raw with its query parameters changed by edit, and its
// host replaced when host is not empty.
func Rewrite(t testing.TB, raw, host string, edit func(q url.Values)) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		u.Host = host + ":" + u.Port()
	}
	q := u.Query()
	if edit != nil {
		edit(q)
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// OtherCA is a certificate authority made for one test, that no server
// trusts: its files are CA (its certificate), and Cert and Key (a client
// certificate it issued, with the common name "postgres").
type OtherCA struct{ CA, Cert, Key string }

// NewOtherCA makes an OtherCA in a temporary directory.
func NewOtherCA(t testing.TB) OtherCA {
	t.Helper()
	dir := t.TempDir()
	caKey := newKey(t)
	caTemplate := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "coord test: another CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(48 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTemplate, caTemplate, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	clientKey := newKey(t)
	clientDER, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "postgres"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(48 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, caCert, &clientKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(clientKey)
	if err != nil {
		t.Fatal(err)
	}
	o := OtherCA{CA: filepath.Join(dir, "ca.crt"), Cert: filepath.Join(dir, "client.crt"), Key: filepath.Join(dir, "client.key")}
	writePEM(t, o.CA, "CERTIFICATE", caDER)
	writePEM(t, o.Cert, "CERTIFICATE", clientDER)
	writePEM(t, o.Key, "PRIVATE KEY", keyDER)
	return o
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func writePEM(t testing.TB, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// OpenRefused checks that lease.Open of raw fails within 10 s with an error
// that wraps lease.ErrUnavailable and for which is reports true: a TLS
// server that refuses the client, or a client that refuses the server,
// says so at Open, in the error, rather than later.
func OpenRefused(t testing.TB, raw, why string, is func(error) bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := lease.Open(ctx, raw)
	if err == nil {
		b.Close()
		t.Fatalf("%s: lease.Open(%q) succeeded", why, raw)
	}
	if !errors.Is(err, lease.ErrUnavailable) || !is(err) {
		t.Fatalf("%s: lease.Open(%q): %v", why, raw, err)
	}
}

// UnknownAuthority reports whether err says the server's certificate chain
// does not lead to a trusted CA.
func UnknownAuthority(err error) bool {
	var e x509.UnknownAuthorityError
	return errors.As(err, &e)
}

// WrongHost reports whether err says the server's certificate does not
// name the host dialed.
func WrongHost(err error) bool {
	var e x509.HostnameError
	return errors.As(err, &e)
}

// RemoteAlert returns a check that err is the TLS alert the server sent
// ("certificate required", "unknown certificate authority"): crypto/tls
// reports one as a net.OpError whose Op is "remote error" (its alert type
// is not exported).
func RemoteAlert(alert string) func(error) bool {
	return func(err error) bool {
		var op *net.OpError
		return errors.As(err, &op) && op.Op == "remote error" && op.Err != nil && op.Err.Error() == "tls: "+alert
	}
}

// ClosedByServer reports whether err says the server closed or reset the
// connection: what a TLS-only server does to a client speaking plaintext.
func ClosedByServer(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET)
}
