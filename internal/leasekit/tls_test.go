package leasekit_test

import (
	"crypto/tls"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"testing"

	"coord/internal/leasekit"
	"coord/internal/leasekit/leasekittest"
	"coord/lease"
)

func TestTakeTLSParamsRemovesThem(t *testing.T) {
	q := url.Values{"cacert": {"a", "ca.pem"}, "cert": {"c.pem"}, "key": {"k.pem"}, "prefix": {"p"}}
	f := leasekit.TakeTLSParams(q)
	if f != (leasekit.TLSFiles{CA: "ca.pem", Cert: "c.pem", Key: "k.pem"}) || len(q) != 1 || q.Get("prefix") != "p" {
		t.Fatalf("files %+v, left %v", f, q)
	}
	if !leasekit.TakeTLSParams(url.Values{}).Empty() {
		t.Fatal("no parameters, yet files")
	}
}

func TestTLSFilesConfig(t *testing.T) {
	ca := leasekittest.NewOtherCA(t)
	cfg, err := leasekit.TLSFiles{CA: ca.CA, Cert: ca.Cert, Key: ca.Key}.Config("test", "db.example")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.MinVersion != tls.VersionTLS12 || cfg.ServerName != "db.example" || cfg.RootCAs == nil || len(cfg.Certificates) != 1 || cfg.InsecureSkipVerify {
		t.Fatalf("config %+v", cfg)
	}
	// No files: the system's roots, no client certificate.
	if cfg, err := (leasekit.TLSFiles{}).Config("test", ""); err != nil || cfg.RootCAs != nil || cfg.Certificates != nil {
		t.Fatalf("empty files: %+v, %v", cfg, err)
	}
	notPEM := filepath.Join(t.TempDir(), "x.pem")
	if err := os.WriteFile(notPEM, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, f := range []leasekit.TLSFiles{
		{CA: filepath.Join(t.TempDir(), "missing.pem")},
		{CA: notPEM},
		{Cert: ca.Cert},
		{Key: ca.Key},
		{Cert: ca.Cert, Key: ca.CA}, // not a key
		{Cert: ca.CA, Key: ca.Key},  // a certificate that is not the key's
	} {
		if _, err := f.Config("test", ""); !errors.Is(err, lease.ErrInvalid) {
			t.Errorf("%+v: %v, want ErrInvalid", f, err)
		}
	}
}
