package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"coord/internal/pki"
)

// BenchmarkAPIPut is what TLS and a token cost one request, apart from
// consensus and disks: PUTs to an API over a replica that applies at once,
// over plain HTTP, and over HTTPS (TLS 1.3, connections kept alive) with a
// token checked on each. Run with -cpu 1 for the cost per request on one
// core: go test ./server -run X -bench APIPut -cpu 1 -count 5.
func BenchmarkAPIPut(b *testing.B) {
	for _, secure := range []bool{false, true} {
		name := "http"
		if secure {
			name = "https+token"
		}
		b.Run(name, func(b *testing.B) {
			f := newFake(1, 1)
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			api := NewAPI(f, APIConfig{Auth: secure})
			tr := &http.Transport{MaxIdleConnsPerHost: 64}
			scheme, header := "http", ""
			if secure {
				src, roots := benchCertificate(b)
				l = tls.NewListener(l, pki.ServerConfig(src, nil))
				tr.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: roots}
				secret, _ := NewTokenSecret()
				if _, err := f.Propose(context.Background(), TokenCreateCommand(Token{Hash: HashToken(secret), Role: TokenWrite})); err != nil {
					b.Fatal(err)
				}
				scheme, header = "https", "Bearer "+secret
			}
			srv := &http.Server{Handler: api}
			go srv.Serve(l)
			defer srv.Close()
			url := scheme + "://" + l.Addr().String() + "/v1/kv/k"
			hc := &http.Client{Transport: tr}
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					req, _ := http.NewRequest("PUT", url, strings.NewReader("v"))
					if header != "" {
						req.Header.Set("Authorization", header)
					}
					resp, err := hc.Do(req)
					if err != nil {
						b.Error(err)
						return
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 200 {
						b.Errorf("status %d", resp.StatusCode)
						return
					}
				}
			})
		})
	}
}

// benchCertificate makes a CA and a certificate for 127.0.0.1.
func benchCertificate(b *testing.B) (*pki.Source, *x509.CertPool) {
	dir := b.TempDir()
	ca, err := pki.NewCA("bench", time.Now(), time.Hour)
	if err != nil {
		b.Fatal(err)
	}
	c, err := ca.Issue(pki.Request{Identity: pki.NodeIdentity("bench", 1), Hosts: []string{"127.0.0.1"}, Server: true, Client: true}, time.Now())
	if err != nil {
		b.Fatal(err)
	}
	cert, key := filepath.Join(dir, "n.crt"), filepath.Join(dir, "n.key")
	if err := c.Save(cert, key); err != nil {
		b.Fatal(err)
	}
	src, err := pki.NewSource(pki.Files{Cert: cert, Key: key}, pki.SourceOptions{})
	if err != nil {
		b.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	return src, roots
}
