package localcluster

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"coord/client"
)

func TestMain(m *testing.M) {
	ServeIfChild()
	os.Exit(m.Run())
}

func startCluster(t *testing.T, nodes int) *Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := Start(ctx, Config{Nodes: nodes, Dir: t.TempDir(), Binary: os.Args[0], SelfServe: true, Proxies: true,
		Args: []string{"--tick", "20ms"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func TestClusterOfProcessesSurvivesKillPauseAndPartition(t *testing.T) {
	c := startCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cl, err := client.New(c.ClientConfig())
	if err != nil {
		t.Fatal(err)
	}
	leader, err := c.WaitLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Put(ctx, "x", []byte("1")); err != nil {
		t.Fatal(err)
	}
	// kill -9 the leader: the others elect a new one and keep the write.
	if err := c.Kill(leader); err != nil {
		t.Fatal(err)
	}
	next, err := c.WaitLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if next == leader {
		t.Fatalf("killed node %d still leads", leader)
	}
	kv, err := cl.Get(ctx, "x")
	if err != nil || string(kv.Value) != "1" {
		t.Fatalf("after failover: %q, %v", kv.Value, err)
	}
	if err := c.Restart(ctx, leader); err != nil {
		t.Fatal(err)
	}
	// Isolate the current leader: the majority side elects another and
	// takes writes; healed, the old leader catches up.
	cur, err := c.WaitLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Isolate(cur); err != nil {
		t.Fatal(err)
	}
	rest := c.Except(cur)
	if _, err := c.WaitLeader(ctx, rest...); err != nil {
		t.Fatal(err)
	}
	rev, err := cl.Put(ctx, "x", []byte("2"))
	if err != nil {
		t.Fatal(err)
	}
	c.Heal()
	// Pause a node, then resume it.
	if err := c.Pause(rest[0]); err != nil {
		t.Fatal(err)
	}
	if err := c.Resume(rest[0]); err != nil {
		t.Fatal(err)
	}
	for {
		st, err := c.Status(ctx, cur)
		if err == nil && st.Applied >= rev {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("isolated node never caught up to %d: %+v %v", rev, st, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// TestClearRemovesOnlyAClustersFiles: a stopped cluster's directory is
// cleared for a new one; a directory with anything else in it is refused
// and left as it was.
func TestClearRemovesOnlyAClustersFiles(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"node-1/wal", "node-1.log", "node-12.log", File, "tls/ca.key"} {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := Clear(dir); err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("left %d entries", len(entries))
	}
	if err := Clear(filepath.Join(dir, "absent")); err != nil {
		t.Fatalf("a missing directory: %v", err)
	}
	for _, foreign := range []string{"notes.txt", "node-x", "node-"} {
		os.WriteFile(filepath.Join(dir, "node-2.log"), []byte("x"), 0o644)
		os.WriteFile(filepath.Join(dir, foreign), []byte("keep"), 0o644)
		if err := Clear(dir); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: err %v, want ErrInvalid", foreign, err)
		}
		for _, name := range []string{"node-2.log", foreign} {
			if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
				t.Errorf("%s: a refused Clear removed %s: %v", foreign, name, err)
			}
		}
		os.Remove(filepath.Join(dir, foreign))
	}
}

// A port taken between its choice and the node's bind (by a parallel test,
// say) makes Start pick new ports and try again, leaving no stray files.
func TestStartRetriesWhenAPortIsTaken(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	real := freeAddr
	calls := 0
	freeAddr = func() (string, error) {
		calls++
		if calls == 2 { // node 1's HTTP address, on the first attempt
			return taken.Addr().String(), nil
		}
		return real()
	}
	defer func() { freeAddr = real }()

	c := startCluster(t, 3)
	if got := c.nodes[1].HTTP; got == taken.Addr().String() {
		t.Fatalf("node 1 kept the taken address %s", got)
	}
	if calls <= 6 {
		t.Fatalf("%d addresses chosen, want a second attempt (more than 6)", calls)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := c.WaitLeader(ctx); err != nil {
		t.Fatal(err)
	}
}
