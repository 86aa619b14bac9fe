package localcluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"coord/client"
	"coord/internal/pki"
)

// TestClientCertAuth runs a cluster whose API requires client
// certificates (--client-cert-auth): a client with the CA but no
// certificate cannot connect; with the cluster's client certificate (and
// its token) it can, through any node, since followers forward to the
// leader presenting their own node certificates.
func TestClientCertAuth(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	ca := filepath.Join(dir, TLSDir, "ca.crt") // where Start makes it
	c, err := Start(ctx, Config{Nodes: 3, Dir: dir, Binary: os.Args[0], SelfServe: true,
		Args: []string{"--tick", "50ms", "--trusted-ca-file", ca, "--client-cert-auth"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	leader, err := c.WaitLeader(ctx) // through the client certificate: Access has it
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range c.Nodes() {
		cl, err := client.New(c.Access().ClientConfig(n.HTTP))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cl.Put(ctx, fmt.Sprintf("via/%d", n.ID), []byte("v")); err != nil {
			t.Fatalf("through node %d (leader %d): %v", n.ID, leader, err)
		}
	}
	sec := c.Security()
	noCert, err := pki.LoadClientConfig(sec.CA, "", "")
	if err != nil {
		t.Fatal(err)
	}
	cl, err := client.New(NewAccess(noCert, c.Access().Token).ClientConfig(c.Endpoints()[0]))
	if err != nil {
		t.Fatal(err)
	}
	// One attempt (Status does not retry): the refusal itself comes back.
	if _, err := cl.Status(ctx, c.Endpoints()[0]); err == nil || !strings.Contains(err.Error(), "certificate required") {
		t.Fatalf("a client without a certificate: %v, want the handshake refused", err)
	}
}
