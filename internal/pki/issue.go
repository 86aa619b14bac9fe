package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"time"
)

// CA is a certificate authority: its certificate and private key. coord
// cluster up makes one per cluster; it signs node and client certificates.
type CA struct {
	Cert *x509.Certificate
	Key  crypto.Signer
	// CertPEM is Cert, PEM-encoded.
	CertPEM []byte
}

// ValidityDefault is how long certificates made by NewCA and Issue are
// valid unless told otherwise: long enough for a local cluster, short
// enough that a forgotten one does not live forever.
const ValidityDefault = 365 * 24 * time.Hour

// clockSkew backdates NotBefore, so that a certificate is valid at once
// on a machine whose clock is a little behind.
const clockSkew = 5 * time.Minute

// NewCA makes a CA for cluster, valid from now for validity (0: the
// default).
func NewCA(cluster string, now time.Time, validity time.Duration) (*CA, error) {
	if err := ValidateCluster(cluster); err != nil {
		return nil, err
	}
	if validity <= 0 {
		validity = ValidityDefault
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("pki: CA key: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "coord CA " + cluster, Organization: []string{"coord"}},
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("pki: CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("pki: CA certificate: %w", err)
	}
	return &CA{Cert: cert, Key: key, CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}, nil
}

func newSerial() (*big.Int, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("pki: serial: %w", err)
	}
	return serial.Add(serial, big.NewInt(1)), nil // never 0
}

// Request describes a certificate to issue.
type Request struct {
	// Identity is who the certificate names (its URI SAN).
	Identity Identity
	// Hosts are the IP addresses and DNS names the certificate is valid
	// for as a TLS server (the HTTPS API's address).
	Hosts []string
	// Server and Client say what the certificate may authenticate: a node
	// certificate is both (it accepts and dials peers, and serves HTTPS);
	// a client certificate is Client only.
	Server, Client bool
	// Validity is how long it is valid from now (0: ValidityDefault).
	Validity time.Duration
}

// Certificate is an issued certificate and its private key, PEM-encoded.
type Certificate struct {
	CertPEM, KeyPEM []byte
	Cert            *x509.Certificate
}

// Issue signs a new key's certificate for req.
func (ca *CA) Issue(req Request, now time.Time) (*Certificate, error) {
	if err := req.Identity.Validate(); err != nil {
		return nil, err
	}
	if !req.Server && !req.Client {
		return nil, fmt.Errorf("%w: a certificate for neither server nor client use", ErrInvalid)
	}
	validity := req.Validity
	if validity <= 0 {
		validity = ValidityDefault
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("pki: key: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: req.Identity.String(), Organization: []string{"coord"}},
		NotBefore:    now.Add(-clockSkew),
		NotAfter:     now.Add(validity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		URIs:         []*url.URL{req.Identity.URI()},
	}
	if tmpl.NotAfter.After(ca.Cert.NotAfter) {
		tmpl.NotAfter = ca.Cert.NotAfter // a certificate outliving its CA would fail verification anyway
	}
	if req.Server {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	}
	if req.Client {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
	}
	for _, h := range req.Hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else if h != "" {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.Key)
	if err != nil {
		return nil, fmt.Errorf("pki: certificate of %s: %w", req.Identity, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return &Certificate{
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
		Cert:    cert,
	}, nil
}

// KeyPEM returns the CA's private key, PEM-encoded.
func (ca *CA) KeyPEM() ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(ca.Key)
	if err != nil {
		return nil, fmt.Errorf("pki: CA key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// Save writes the CA's certificate and key to certFile and keyFile, mode
// 0600.
func (ca *CA) Save(certFile, keyFile string) error {
	keyPEM, err := ca.KeyPEM()
	if err != nil {
		return err
	}
	if err := WriteFile(certFile, ca.CertPEM); err != nil {
		return err
	}
	return WriteFile(keyFile, keyPEM)
}

// Save writes the certificate and key to certFile and keyFile, mode 0600.
func (c *Certificate) Save(certFile, keyFile string) error {
	if err := WriteFile(certFile, c.CertPEM); err != nil {
		return err
	}
	return WriteFile(keyFile, c.KeyPEM)
}

// LoadCA reads a CA saved with Save.
func LoadCA(certFile, keyFile string) (*CA, error) {
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return nil, fmt.Errorf("pki: CA: %w", err)
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, fmt.Errorf("pki: CA key: %w", err)
	}
	return parseCA(certPEM, keyPEM, certFile, keyFile)
}

// parseCA makes a CA of the contents of its certificate and key files,
// named certFile and keyFile in errors.
func parseCA(certPEM, keyPEM []byte, certFile, keyFile string) (*CA, error) {
	certs, err := parseCertificates(certPEM)
	if err != nil {
		return nil, fmt.Errorf("pki: CA %s: %w", certFile, err)
	}
	block, _ := pem.Decode(keyPEM)
	if block == nil {
		return nil, fmt.Errorf("%w: CA key %s: no PEM block", ErrInvalid, keyFile)
	}
	key, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%w: CA key %s: %v", ErrInvalid, keyFile, err)
	}
	signer, ok := key.(crypto.Signer)
	if !ok || !certs[0].IsCA {
		return nil, fmt.Errorf("%w: %s and %s are not a CA certificate and its key", ErrInvalid, certFile, keyFile)
	}
	ca := &CA{Cert: certs[0], Key: signer, CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: certs[0].Raw})}
	if !publicKeysEqual(ca.Cert.PublicKey, signer.Public()) {
		return nil, fmt.Errorf("%w: CA key %s does not match %s", ErrInvalid, keyFile, certFile)
	}
	return ca, nil
}

func publicKeysEqual(a, b crypto.PublicKey) bool {
	ak, ok := a.(interface{ Equal(crypto.PublicKey) bool })
	return ok && ak.Equal(b)
}

// parseCertificates decodes every CERTIFICATE block of a PEM file; at
// least one.
func parseCertificates(b []byte) ([]*x509.Certificate, error) {
	var certs []*x509.Certificate
	for {
		var block *pem.Block
		block, b = pem.Decode(b)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
		}
		certs = append(certs, c)
	}
	if len(certs) == 0 {
		return nil, fmt.Errorf("%w: no PEM certificate", ErrInvalid)
	}
	return certs, nil
}

// WriteFile writes data to name with mode 0600, atomically (a temporary
// file renamed over it), so that a node watching the file never reads
// half of it. The directory is created (0700) if missing.
func WriteFile(name string, data []byte) error {
	dir := filepath.Dir(name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("pki: %w", err)
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(name)+".tmp-*")
	if err != nil {
		return fmt.Errorf("pki: %w", err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return fmt.Errorf("pki: %w", err)
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("pki: write %s: %w", name, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("pki: sync %s: %w", name, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("pki: %w", err)
	}
	if err := os.Rename(tmp.Name(), name); err != nil {
		return fmt.Errorf("pki: %w", err)
	}
	return nil
}
