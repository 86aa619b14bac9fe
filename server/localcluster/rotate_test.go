package localcluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"math/big"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"coord/client"
	"coord/internal/pki"
)

// servedSerial returns the serial of the certificate node n's API serves.
func servedSerial(addr string) (*big.Int, error) {
	c, err := tls.Dial("tcp", addr, &tls.Config{MinVersion: tls.VersionTLS13, InsecureSkipVerify: true})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].SerialNumber, nil
}

// TestRotatedClusterKeepsServing rotates a running cluster to a new CA
// the way docs/security.md says, while a client writes without pause:
// trust both CAs, give every node a certificate of the new one, trust only
// the new one; each step is a file change and a SIGHUP, no restart. Then
// every node is restarted in turn, so that each makes new peer
// connections, which the others accept only with their reloaded
// certificates and bundle. No write fails, and a client that trusts only
// the new CA reaches every node.
func TestRotatedClusterKeepsServing(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c, err := Start(ctx, Config{Nodes: 3, Dir: t.TempDir(), Binary: os.Args[0], SelfServe: true, Args: []string{"--tick", "50ms"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	if _, err := c.WaitLeader(ctx); err != nil {
		t.Fatal(err)
	}
	sec := c.Security()
	oldCA, err := os.ReadFile(sec.CA)
	if err != nil {
		t.Fatal(err)
	}
	newCA, err := pki.NewCA(sec.Cluster, time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	// The writer trusts both CAs, as every client must during a rotation.
	both := x509.NewCertPool()
	both.AppendCertsFromPEM(oldCA)
	both.AppendCertsFromPEM(newCA.CertPEM)
	wcfg := c.ClientConfig()
	wcfg.TLS = &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: both}
	writer, err := client.New(wcfg)
	if err != nil {
		t.Fatal(err)
	}
	var writes, failures atomic.Int64
	var firstFailure atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			wctx, wcancel := context.WithTimeout(ctx, 20*time.Second)
			_, err := writer.Put(wctx, fmt.Sprintf("rotation/%d", i%50), []byte("v"))
			wcancel()
			if err != nil {
				failures.Add(1)
				firstFailure.CompareAndSwap(nil, err.Error())
			} else {
				writes.Add(1)
			}
		}
	}()
	reloadAll := func(step string) {
		t.Helper()
		for _, id := range c.IDs() {
			if err := c.Reload(id); err != nil {
				t.Fatalf("%s: SIGHUP node %d: %v", step, id, err)
			}
		}
	}
	progress := func(step string) {
		t.Helper()
		target := writes.Load() + 20
		for writes.Load() < target {
			if ctx.Err() != nil {
				t.Fatalf("%s: writes stopped at %d (failures %d: %v)", step, writes.Load(), failures.Load(), firstFailure.Load())
			}
			time.Sleep(10 * time.Millisecond) // the writer runs on its own: watch its count
		}
	}
	progress("before the rotation")

	// 1. Trust both CAs.
	if err := pki.WriteFile(sec.CA, append(append([]byte{}, oldCA...), newCA.CertPEM...)); err != nil {
		t.Fatal(err)
	}
	reloadAll("bundle")
	for _, id := range c.IDs() {
		waitLog(t, c, id, "SIGHUP: reloading certificates")
	}
	progress("after trusting both CAs")

	// 2. New certificates from the new CA; wait until every API serves
	// its new one.
	serials := map[uint64]*big.Int{}
	for _, n := range c.Nodes() {
		cert, err := newCA.Issue(pki.Request{Identity: pki.NodeIdentity(sec.Cluster, n.ID), Hosts: []string{"127.0.0.1", "localhost"},
			Server: true, Client: true}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		certFile, keyFile := sec.NodeFiles(n.ID)
		if err := cert.Save(certFile, keyFile); err != nil {
			t.Fatal(err)
		}
		serials[n.ID] = cert.Cert.SerialNumber
	}
	reloadAll("new certificates")
	for _, n := range c.Nodes() {
		for {
			got, err := servedSerial(n.HTTP)
			if err == nil && got.Cmp(serials[n.ID]) == 0 {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("node %d never served its new certificate (%v, %v)", n.ID, got, err)
			}
			time.Sleep(20 * time.Millisecond) // another process reloads: nothing to wait on but its answers
		}
	}
	progress("after the new certificates")

	// 3. Trust only the new CA.
	if err := pki.WriteFile(sec.CA, newCA.CertPEM); err != nil {
		t.Fatal(err)
	}
	reloadAll("new CA only")
	if err := c.ReloadAccess(); err != nil {
		t.Fatal(err)
	}
	progress("after dropping the old CA")

	// 4. New peer connections everywhere: restart each node in turn.
	for _, id := range c.IDs() {
		if err := c.Stop(id); err != nil {
			t.Fatal(err)
		}
		if err := c.Restart(ctx, id); err != nil {
			t.Fatal(err)
		}
		if _, err := c.WaitLeader(ctx); err != nil {
			t.Fatalf("after restarting node %d: %v", id, err)
		}
		progress(fmt.Sprintf("after restarting node %d", id))
	}
	close(stop)
	wg.Wait()
	if n := failures.Load(); n > 0 {
		t.Fatalf("%d of %d writes failed during the rotation; first: %v", n, n+writes.Load(), firstFailure.Load())
	}
	// A client that trusts only the new CA reaches every node, and every
	// node has every write.
	only := x509.NewCertPool()
	only.AppendCertsFromPEM(newCA.CertPEM)
	last, err := writer.Put(ctx, "rotation/done", []byte("yes"))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range c.Nodes() {
		cfg := c.Access().ClientConfig(n.HTTP)
		cfg.TLS = &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: only}
		cl, err := client.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		for {
			kv, err := cl.Get(ctx, "rotation/done", client.Stale())
			if err == nil && kv.Revision >= last {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("node %d with the new CA only: %+v %v", n.ID, kv, err)
			}
			time.Sleep(20 * time.Millisecond) // replication to a follower: nothing to wait on from here
		}
	}
	t.Logf("%d writes through the rotation, none failed", writes.Load())
}
