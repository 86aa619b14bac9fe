package server

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"coord/internal/pki"
)

// nodeFiles writes a CA and node certificates of cluster for ids into a
// directory, and returns it.
func nodeFiles(t testing.TB, cluster string, ids ...uint64) (dir string, ca *pki.CA) {
	t.Helper()
	dir = t.TempDir()
	ca, err := pki.NewCA(cluster, time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := ca.Save(filepath.Join(dir, "ca.crt"), filepath.Join(dir, "ca.key")); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		c, err := ca.Issue(pki.Request{Identity: pki.NodeIdentity(cluster, id), Hosts: []string{"127.0.0.1"}, Server: true, Client: true}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Save(filepath.Join(dir, fmt.Sprintf("n%d.crt", id)), filepath.Join(dir, fmt.Sprintf("n%d.key", id))); err != nil {
			t.Fatal(err)
		}
	}
	return dir, ca
}

func secureOptions(dir string, id uint64) SecurityOptions {
	n := fmt.Sprintf("n%d", id)
	return SecurityOptions{
		PeerCertFile: filepath.Join(dir, n+".crt"), PeerKeyFile: filepath.Join(dir, n+".key"), PeerTrustedCAFile: filepath.Join(dir, "ca.crt"),
		CertFile: filepath.Join(dir, n+".crt"), KeyFile: filepath.Join(dir, n+".key"),
	}
}

func TestSecurityRefusesAnotherNodesCertificate(t *testing.T) {
	dir, _ := nodeFiles(t, "c1", 1, 2)
	log := slog.New(slog.DiscardHandler)
	sec, err := secureOptions(dir, 1).Load(1, log)
	if err != nil {
		t.Fatal(err)
	}
	if sec.Cluster() != "c1" {
		t.Fatalf("cluster %q", sec.Cluster())
	}
	// Node 2's files given to node 1: refused at start.
	if _, err := secureOptions(dir, 2).Load(1, log); !errors.Is(err, pki.ErrIdentity) || !strings.Contains(err.Error(), "this is node 1") {
		t.Fatalf("node 2's certificate for node 1: %v", err)
	}
	// And on reload: node 1's files replaced by node 2's are refused, and
	// node 1 keeps its certificate.
	for _, ext := range []string{".crt", ".key"} {
		b, err := os.ReadFile(filepath.Join(dir, "n2"+ext))
		if err != nil {
			t.Fatal(err)
		}
		if err := pki.WriteFile(filepath.Join(dir, "n1"+ext), b); err != nil {
			t.Fatal(err)
		}
	}
	if err := sec.Reload(); err == nil || !strings.Contains(err.Error(), "this is node 1") {
		t.Fatalf("reload with node 2's certificate: %v", err)
	}
	if id, _ := pki.IdentityOf(sec.Peer.Leaf()); id.Node != 1 {
		t.Fatalf("after a refused reload the node serves %v", id)
	}
}

func TestSecurityOptionsNameWhatIsMissing(t *testing.T) {
	dir, _ := nodeFiles(t, "c1", 1)
	log := slog.New(slog.DiscardHandler)
	short := filepath.Join(dir, "short.token")
	if err := os.WriteFile(short, []byte("abc\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	full := secureOptions(dir, 1)
	for name, tt := range map[string]struct {
		opts SecurityOptions
		has  string
	}{
		"nothing":          {SecurityOptions{}, "unless told --insecure"},
		"no key":           {func() SecurityOptions { o := full; o.KeyFile = ""; return o }(), "--key-file not set"},
		"insecure and tls": {func() SecurityOptions { o := full; o.Insecure = true; return o }(), "--insecure with"},
		"client auth, no CA": {func() SecurityOptions { o := full; o.ClientCertAuth = true; return o }(),
			"--client-cert-auth needs --trusted-ca-file"},
		"short token": {func() SecurityOptions { o := full; o.InitialAdminToken = short; return o }(), "want at least 32"},
	} {
		if _, err := tt.opts.Load(1, log); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.has) {
			t.Errorf("%s: %v, want ErrInvalid saying %q", name, err, tt.has)
		}
	}
	if sec, err := (SecurityOptions{Insecure: true}).Load(1, log); sec != nil || err != nil {
		t.Fatalf("--insecure: %v %v", sec, err)
	}
}
