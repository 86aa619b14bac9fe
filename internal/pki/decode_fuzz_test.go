package pki

import (
	"bytes"
	"encoding/pem"
	"errors"
	"net/url"
	"testing"
	"time"
)

// fuzzMaterial is a real CA and a node certificate it issued, the seeds
// of the fuzz targets below.
func fuzzMaterial(f *testing.F) (*CA, *Certificate) {
	f.Helper()
	now := time.Now()
	ca, err := NewCA("c1", now, 0)
	if err != nil {
		f.Fatal(err)
	}
	leaf, err := ca.Issue(Request{Identity: NodeIdentity("c1", 3), Hosts: []string{"127.0.0.1"}, Server: true, Client: true}, now)
	if err != nil {
		f.Fatal(err)
	}
	return ca, leaf
}

// derOf returns the bytes of the first PEM block of b.
func derOf(f *testing.F, b []byte) []byte {
	f.Helper()
	block, _ := pem.Decode(b)
	if block == nil {
		f.Fatalf("no PEM block in %q", b)
	}
	return block.Bytes
}

// wrapPEM appends der to text as a PEM block of type kind, if der is not
// empty: the fuzzer mutates DER directly, not through base64.
func wrapPEM(text []byte, kind string, der []byte) []byte {
	if len(der) == 0 {
		return text
	}
	return append(bytes.Clone(text), pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der})...)
}

// FuzzParseCertificates feeds arbitrary bytes, as a CA bundle or
// certificate file read from disk, to parseCertificates: never a panic,
// an error wraps ErrInvalid, and what it accepts encodes back (each
// certificate's DER as a PEM block) to certificates with the same bytes.
func FuzzParseCertificates(f *testing.F) {
	ca, leaf := fuzzMaterial(f)
	bundle := append(bytes.Clone(ca.CertPEM), leaf.CertPEM...)
	f.Add(ca.CertPEM, []byte(nil))
	f.Add(bundle, []byte(nil))
	f.Add(leaf.KeyPEM, []byte(nil))                                     // a key, no certificate
	f.Add(append(bytes.Clone(leaf.KeyPEM), ca.CertPEM...), []byte(nil)) // a key, then one
	f.Add(ca.CertPEM[:len(ca.CertPEM)/2], []byte(nil))                  // cut in the middle
	f.Add([]byte(nil), derOf(f, leaf.CertPEM))
	f.Add([]byte(nil), derOf(f, leaf.CertPEM)[:100])
	f.Add([]byte("-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n"), []byte(nil))
	f.Fuzz(func(t *testing.T, text, der []byte) {
		data := wrapPEM(text, "CERTIFICATE", der)
		certs, err := parseCertificates(data)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v does not wrap ErrInvalid", err)
			}
			return
		}
		var again []byte
		for _, c := range certs {
			again = append(again, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})...)
		}
		back, err := parseCertificates(again)
		if err != nil || len(back) != len(certs) {
			t.Fatalf("re-parse of %d certificates: %d, %v", len(certs), len(back), err)
		}
		for i := range certs {
			if !back[i].Equal(certs[i]) {
				t.Fatalf("certificate %d differs after a round trip", i)
			}
		}
	})
}

// FuzzParseCA feeds arbitrary bytes, as a CA's certificate and key files
// (LoadCA), to parseCA: never a panic, an error wraps ErrInvalid, and a
// CA it accepts is a CA certificate with its own key, whose files
// (CertPEM, KeyPEM) load back to the same CA.
func FuzzParseCA(f *testing.F) {
	ca, leaf := fuzzMaterial(f)
	keyPEM, err := ca.KeyPEM()
	if err != nil {
		f.Fatal(err)
	}
	caKey, leafKey := derOf(f, keyPEM), derOf(f, leaf.KeyPEM)
	f.Add(ca.CertPEM, []byte(nil), caKey)
	f.Add(ca.CertPEM, []byte(nil), leafKey)   // another key
	f.Add(leaf.CertPEM, []byte(nil), leafKey) // not a CA
	f.Add(ca.CertPEM, []byte(nil), caKey[:len(caKey)/2])
	f.Add([]byte(nil), derOf(f, ca.CertPEM), caKey) // the DER, for the fuzzer to mutate
	f.Add(ca.CertPEM, []byte(nil), []byte(nil))     // no key block
	f.Fuzz(func(t *testing.T, certText, certDER, keyDER []byte) {
		got, err := parseCA(wrapPEM(certText, "CERTIFICATE", certDER), wrapPEM(nil, "PRIVATE KEY", keyDER), "ca.crt", "ca.key")
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v does not wrap ErrInvalid", err)
			}
			return
		}
		if !got.Cert.IsCA || !publicKeysEqual(got.Cert.PublicKey, got.Key.Public()) {
			t.Fatalf("accepted a CA that is not one, or whose key is another's")
		}
		keyPEM, err := got.KeyPEM()
		if err != nil {
			t.Fatalf("KeyPEM of an accepted CA: %v", err)
		}
		back, err := parseCA(got.CertPEM, keyPEM, "ca.crt", "ca.key")
		if err != nil || !back.Cert.Equal(got.Cert) || !publicKeysEqual(back.Cert.PublicKey, back.Key.Public()) {
			t.Fatalf("the CA's own files do not load back: %v", err)
		}
	})
}

// FuzzParseIdentity feeds arbitrary URIs, as a peer's or a client's
// certificate carries them (the x509 parser makes them url.URLs), to
// parseIdentity: never a panic, an error wraps ErrIdentity, and what it
// accepts is a valid identity whose URI parses back to it.
func FuzzParseIdentity(f *testing.F) {
	for _, s := range []string{"coord://c1/node/3", "coord://prod-eu/client/admin", "coord://c1/node/0",
		"coord://c1/node/03", "coord://c1/node/-3", "coord://c1/node/18446744073709551616", "coord://C1/node/3",
		"coord://c1:80/node/3", "coord://u@c1/node/3", "coord://c1/node/3?x", "coord://c1/node/3#x",
		"coord://c1/client/a/b", "coord://c1/client/", "coord://c1/pod/x", "coord://c1", "coord://c1/node/%33"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		u, err := url.Parse(s)
		if err != nil {
			return // the x509 parser refuses the certificate
		}
		id, err := parseIdentity(u)
		if err != nil {
			if !errors.Is(err, ErrIdentity) {
				t.Fatalf("parseIdentity(%q): error %v does not wrap ErrIdentity", s, err)
			}
			return
		}
		if err := id.Validate(); err != nil {
			t.Fatalf("parseIdentity(%q) = %+v, which is not valid: %v", s, id, err)
		}
		back, err := parseIdentity(id.URI())
		if err != nil || back != id {
			t.Fatalf("parseIdentity(%q) = %+v, whose URI %s parses to %+v, %v", s, id, id.URI(), back, err)
		}
	})
}
