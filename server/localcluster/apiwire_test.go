package localcluster

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"coord/apiwire"
	"coord/client"
)

// wireCluster starts a 3-node cluster (TLS with tokens unless insecure)
// and returns it with a wire client whose first endpoint is a follower,
// so that writes are forwarded until the client follows the leader.
func wireCluster(t *testing.T, insecure bool) (*Cluster, client.Config, uint64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := Start(ctx, Config{Nodes: 3, Dir: t.TempDir(), Binary: os.Args[0], SelfServe: true, Insecure: insecure,
		Args: []string{"--tick", "20ms"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	leader, err := c.WaitLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var endpoints []string
	for _, n := range c.Nodes() {
		if n.ID != leader {
			endpoints = append([]string{n.HTTP}, endpoints...)
		} else {
			endpoints = append(endpoints, n.HTTP)
		}
	}
	cfg := c.Access().ClientConfig(endpoints...)
	// The client speaks wire by default (Config.NoWire).
	return c, cfg, leader
}

// The whole client works over wire, with TLS and tokens and in plain
// mode: writes through a follower first, reads, deletes, a batch, a long
// poll and an event stream.
func TestWireClientAgainstACluster(t *testing.T) {
	for _, insecure := range []bool{false, true} {
		t.Run(fmt.Sprintf("insecure=%v", insecure), func(t *testing.T) {
			c, cfg, _ := wireCluster(t, insecure)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			cl, err := client.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			rev, err := cl.Put(ctx, "w/a", []byte("1"))
			if err != nil {
				t.Fatal(err)
			}
			kv, err := cl.Get(ctx, "w/a")
			if err != nil || string(kv.Value) != "1" {
				t.Fatalf("get: %q, %v", kv.Value, err)
			}
			if _, err := cl.Batch(ctx, client.BatchPut("w/b", []byte("2")), client.BatchPut("w/c", []byte("3"))); err != nil {
				t.Fatalf("batch: %v", err)
			}
			if _, err := cl.Delete(ctx, "w/a"); err != nil {
				t.Fatal(err)
			}
			if _, err := cl.Get(ctx, "w/a"); !errors.Is(err, client.ErrNotFound) {
				t.Fatalf("get after delete: %v, want ErrNotFound", err)
			}
			// A long poll waits for the next change.
			changed := make(chan error, 1)
			go func() {
				_, err := cl.WatchKey(ctx, "w/b", rev+10, 30*time.Second)
				changed <- err
			}()
			for i := 0; ; i++ {
				latest, err := cl.Put(ctx, "w/b", []byte(fmt.Sprint(i)))
				if err != nil {
					t.Fatal(err)
				}
				if latest >= rev+10 {
					break
				}
			}
			if err := <-changed; err != nil {
				t.Fatalf("long poll: %v", err)
			}
			// An event stream, through the follower, over a wire transport.
			tr := apiwire.NewTransport(apiwire.TransportConfig{TLS: cfg.TLS})
			defer tr.CloseIdleConnections()
			scheme := "https"
			if insecure {
				scheme = "http"
			}
			sctx, scancel := context.WithCancel(ctx)
			defer scancel()
			req, _ := http.NewRequestWithContext(sctx, "GET", scheme+"://"+cfg.Endpoints[0]+"/v1/watch/kv/w/s?stream=true", nil)
			if cfg.Token != "" {
				req.Header.Set("Authorization", "Bearer "+cfg.Token)
			}
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
				t.Fatalf("stream: %d %v", resp.StatusCode, resp.Header)
			}
			if _, err := cl.Put(ctx, "w/s", []byte("streamed")); err != nil {
				t.Fatal(err)
			}
			lines := bufio.NewScanner(resp.Body)
			for lines.Scan() {
				if strings.Contains(lines.Text(), "c3RyZWFtZWQ") || strings.Contains(lines.Text(), "streamed") {
					break // the value, base64 or plain
				}
			}
			if err := lines.Err(); err != nil {
				t.Fatalf("stream: %v", err)
			}
			// A follower forwards a write it is sent over wire, and says
			// which node it is.
			preq, _ := http.NewRequestWithContext(ctx, "PUT", scheme+"://"+cfg.Endpoints[0]+"/v1/kv/w/f", strings.NewReader("forwarded"))
			if cfg.Token != "" {
				preq.Header.Set("Authorization", "Bearer "+cfg.Token)
			}
			presp, err := tr.RoundTrip(preq)
			if err != nil {
				t.Fatal(err)
			}
			presp.Body.Close()
			if presp.StatusCode != 200 || presp.Header.Get("Coord-Node") == presp.Header.Get("Coord-Leader") {
				t.Fatalf("PUT through follower %s: %d, node %q, leader %q", cfg.Endpoints[0], presp.StatusCode, presp.Header.Get("Coord-Node"), presp.Header.Get("Coord-Leader"))
			}
			if kv, err := cl.Get(ctx, "w/f"); err != nil || string(kv.Value) != "forwarded" {
				t.Fatalf("forwarded write: %q, %v", kv.Value, err)
			}
			_ = c
		})
	}
}

// Over wire, a missing or wrong token is refused exactly as over HTTP.
func TestWireRefusesWhatHTTPRefuses(t *testing.T) {
	_, cfg, _ := wireCluster(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, token := range []string{"", "not-a-token"} {
		for _, useWire := range []bool{false, true} {
			bad := cfg
			bad.Token, bad.NoWire = token, !useWire
			cl, err := client.New(bad)
			if err != nil {
				t.Fatal(err)
			}
			_, err = cl.Put(ctx, "w/x", []byte("1"))
			if !errors.Is(err, client.ErrUnauthenticated) {
				t.Errorf("token %q, wire %v: %v, want ErrUnauthenticated", token, useWire, err)
			}
		}
	}
	// Without the cluster's CA, the handshake fails as over HTTPS.
	noCA := cfg
	noCA.TLS = noCA.TLS.Clone()
	noCA.TLS.RootCAs = nil
	cl, err := client.New(noCA)
	if err != nil {
		t.Fatal(err)
	}
	short, cancelShort := context.WithTimeout(ctx, 3*time.Second)
	defer cancelShort()
	if _, err := cl.Get(short, "w/x"); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("without the CA: %v, want a certificate error", err)
	}
}

// Writes under load keep succeeding while the leader is killed: the wire
// client follows the next leader, and every acknowledged write reads back.
func TestWireClientFollowsALeaderChange(t *testing.T) {
	c, cfg, leader := wireCluster(t, true)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cl, err := client.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	const writers, each = 8, 40
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	halfway := make(chan struct{})
	var once sync.Once
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				if i == each/2 {
					once.Do(func() { close(halfway) })
				}
				if _, err := cl.Put(ctx, fmt.Sprintf("lc/%d/%d", w, i), []byte("v")); err != nil {
					errs <- fmt.Errorf("writer %d, write %d: %w", w, i, err)
					return
				}
			}
		}()
	}
	<-halfway
	if err := c.Kill(leader); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for w := range writers {
		for i := range each {
			if _, err := cl.Get(ctx, fmt.Sprintf("lc/%d/%d", w, i)); err != nil {
				t.Fatalf("acknowledged write lc/%d/%d: %v", w, i, err)
			}
		}
	}
}

// The client's default transport against real nodes that stop serving
// wire: a node restarted with --wire=false is sent HTTP/1.1 (over TLS by
// ALPN, in clear after its answer to the preface), and the client carries
// on; the request that met the closed connection is retried as over HTTP.
func TestDefaultClientAcrossARestartWithoutWire(t *testing.T) {
	for _, insecure := range []bool{false, true} {
		t.Run(fmt.Sprintf("insecure=%v", insecure), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			c, err := Start(ctx, Config{Nodes: 1, Dir: t.TempDir(), Binary: os.Args[0], SelfServe: true, Insecure: insecure,
				Args: []string{"--tick", "20ms"}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.Close)
			if _, err := c.WaitLeader(ctx); err != nil {
				t.Fatal(err)
			}
			cl, err := client.New(c.ClientConfig()) // the default: wire, with a fallback
			if err != nil {
				t.Fatal(err)
			}
			if _, err := cl.Put(ctx, "before", []byte("1")); err != nil {
				t.Fatal(err)
			}
			if err := c.Stop(1); err != nil {
				t.Fatal(err)
			}
			c.cfg.Args = append(c.cfg.Args, "--wire=false")
			if err := c.Restart(ctx, 1); err != nil {
				t.Fatal(err)
			}
			if _, err := c.WaitLeader(ctx); err != nil {
				t.Fatal(err)
			}
			if _, err := cl.Put(ctx, "after", []byte("2")); err != nil {
				t.Fatalf("a write after the restart without wire: %v", err)
			}
			for key, want := range map[string]string{"before": "1", "after": "2"} {
				if kv, err := cl.Get(ctx, key); err != nil || string(kv.Value) != want {
					t.Fatalf("get %s: %q %v, want %q", key, kv.Value, err, want)
				}
			}
		})
	}
}
