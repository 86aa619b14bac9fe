package localcluster

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"coord/client"
	"coord/raft"
	"coord/storage/raftstore"
	"coord/storage/vfs"
	"coord/transport/tcp"
)

// fakePeer impersonates a cluster member on its Raft address: the test
// speaks Raft to a real node through the real transport.
type fakePeer struct {
	tr  *tcp.Transport
	in  chan raft.Message
	log string
}

func newFakePeer(t *testing.T, id uint64, addr string, peers map[uint64]string) *fakePeer {
	t.Helper()
	p := &fakePeer{in: make(chan raft.Message, 1024)}
	cfg := tcp.DefaultConfig()
	cfg.ID, cfg.ListenAddr, cfg.Peers = id, addr, peers
	cfg.Logger = slog.New(slog.DiscardHandler)
	cfg.Deliver = func(m raft.Message) {
		select {
		case p.in <- m:
		default:
		}
	}
	tr, err := tcp.New(cfg)
	if err != nil {
		t.Fatalf("impersonate node %d on %s: %v", id, addr, err)
	}
	p.tr = tr
	t.Cleanup(func() { tr.Close() })
	return p
}

// askVote sends a vote request for term (with a log that is up to date by
// any measure, and marked as a leadership transfer so that no leader lease
// stands in the way) and returns the answer. ok is false if none came: the
// node may be down.
func (p *fakePeer) askVote(t *testing.T, from, to, term uint64, wait time.Duration) (granted, ok bool) {
	t.Helper()
	deadline := time.After(wait)
	send := time.NewTicker(100 * time.Millisecond) // until the connection is up
	defer send.Stop()
	req := raft.Message{Type: raft.MsgVoteRequest, From: from, To: to, Term: term, LogIndex: 1 << 40, LogTerm: term, Transfer: true}
	p.tr.Send([]raft.Message{req})
	for {
		select {
		case m := <-p.in:
			if m.Type == raft.MsgVoteResponse && m.From == to && (m.Term == term || m.Reject) {
				return !m.Reject, true
			}
		case <-send.C:
			p.tr.Send([]raft.Message{req})
		case <-deadline:
			return false, false
		}
	}
}

// hardState reads a stopped node's term and vote from its data directory.
func hardState(t *testing.T, dir string) raft.HardState {
	t.Helper()
	d, err := raftstore.Open(vfs.OS, dir, raftstore.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatalf("read %s: %v", dir, err)
	}
	defer d.Close()
	hs, _, err := d.InitialState()
	if err != nil {
		t.Fatal(err)
	}
	return hs
}

func copyDir(t *testing.T, from, to string) {
	t.Helper()
	if err := os.RemoveAll(to); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("cp", "-a", from, to).CombinedOutput(); err != nil {
		t.Fatalf("cp -a %s %s: %v\n%s", from, to, err, out)
	}
}

func segments(t *testing.T, dir string) []string {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, "wal", "*.wal"))
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(names)
	return names
}

// TestDamagedDataDirectories is the damage table of issue 11 on real
// `coord server` processes and real files. A node votes in a term, is
// killed (kill -9), has its data directory damaged in one way, and is
// restarted. For each damage the outcome is fixed: it refuses to start
// with a message naming what is missing and how to replace the node, or
// it starts (a torn or zeroed tail is what a crash leaves, and is
// truncated) and then still refuses a second vote in the term it voted in.
// Asked by another candidate in that term, it must refuse or not be
// running: one vote per node per term.
func TestDamagedDataDirectories(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// Insecure: the test impersonates the victim's peers on its Raft port,
	// which mutual TLS exists to prevent (attack_test.go).
	c, err := Start(ctx, Config{Nodes: 3, Dir: t.TempDir(), Binary: os.Args[0], SelfServe: true, Insecure: true,
		Args: []string{"--tick", "20ms", "--snapshot-entries", "40", "--wal-segment-bytes", "2048"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	leader, err := c.WaitLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := client.New(client.DefaultConfig(c.Endpoints()...))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 150 {
		if _, err := cl.Put(ctx, fmt.Sprintf("key-%03d", i), []byte(strings.Repeat("v", 40))); err != nil {
			t.Fatal(err)
		}
	}
	// The victim is a follower; the leader and the other follower die, and
	// the test takes their places on the network.
	var victim, other uint64
	for _, id := range c.Except(leader) {
		if victim == 0 {
			victim = id
		} else {
			other = id
		}
	}
	// Wait until the victim has applied everything (so its log is long),
	// then kill the others.
	for {
		st, err := c.Status(ctx, victim)
		if err == nil && st.Applied >= 150 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("victim %d did not catch up: %+v %v", victim, st, err)
		}
		time.Sleep(20 * time.Millisecond) // polling another process's HTTP status
	}
	for _, id := range []uint64{leader, other} {
		if err := c.Kill(id); err != nil {
			t.Fatal(err)
		}
	}
	nodes := map[uint64]Node{}
	for _, n := range c.Nodes() {
		nodes[n.ID] = n
	}
	peers := map[uint64]string{}
	for id, n := range nodes {
		peers[id] = n.Peer
	}
	asOther := newFakePeer(t, other, nodes[other].Peer, peers)
	asLeader := newFakePeer(t, leader, nodes[leader].Peer, peers)

	// The victim votes for "other" in a new term, durably (it answers only
	// once the vote is on disk).
	st, err := c.Status(ctx, victim)
	if err != nil {
		t.Fatal(err)
	}
	term := st.Term + 1
	if granted, ok := asOther.askVote(t, other, victim, term, 30*time.Second); !granted || !ok {
		t.Fatalf("node %d did not grant its term-%d vote to %d (answered %v)", victim, term, other, ok)
	}
	if err := c.Kill(victim); err != nil {
		t.Fatal(err)
	}
	dir := nodes[victim].Data
	if hs := hardState(t, dir); hs.Term != term || hs.Vote != other {
		t.Fatalf("victim's hard state %+v, want term %d vote %d", hs, term, other)
	}
	if n := len(segments(t, dir)); n < 2 {
		t.Fatalf("the victim's log has %d segments; the test needs several", n)
	}
	pristine := filepath.Join(t.TempDir(), "pristine")
	copyDir(t, dir, pristine)

	// otherIdentity is an IDENTITY file of node victim in another cluster.
	otherIdentity := func(t *testing.T) []byte {
		other := filepath.Join(t.TempDir(), "other")
		d, err := raftstore.Open(vfs.OS, other, raftstore.Options{Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		if err := d.SetIdentity(raftstore.Identity{ClusterID: 0x0ddba11, NodeID: victim, Created: time.Now()}); err != nil {
			t.Fatal(err)
		}
		d.Close()
		b, err := os.ReadFile(filepath.Join(other, "IDENTITY"))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	lastSegment := func(t *testing.T) string { s := segments(t, dir); return s[len(s)-1] }
	cut := func(t *testing.T, name string, change func(b []byte) []byte) {
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(name, change(b), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name   string
		damage func(t *testing.T)
		refuse string // the start fails saying this; "" if it starts
	}{
		{"undamaged", func(*testing.T) {}, ""},
		{"WAL deleted", func(t *testing.T) {
			if err := os.RemoveAll(filepath.Join(dir, "wal")); err != nil {
				t.Fatal(err)
			}
		}, "write-ahead log " + filepath.Join(dir, "wal") + " is missing"},
		{"newest segment deleted", func(t *testing.T) {
			if err := os.Remove(lastSegment(t)); err != nil {
				t.Fatal(err)
			}
		}, "is missing: this segment ends by naming it"},
		{"snapshot deleted", func(t *testing.T) {
			snaps, _ := filepath.Glob(filepath.Join(dir, "snap", "*"))
			if len(snaps) == 0 {
				t.Fatal("no snapshot to delete")
			}
			for _, s := range snaps {
				if err := os.Remove(s); err != nil {
					t.Fatal(err)
				}
			}
		}, "which is missing"},
		{"tail cut into the vote's record", func(t *testing.T) {
			cut(t, lastSegment(t), func(b []byte) []byte { return b[:len(b)-10] })
		}, ""},
		{"tail zeroed", func(t *testing.T) {
			cut(t, lastSegment(t), func(b []byte) []byte {
				clear(b[len(b)-64:])
				return b
			})
		}, ""},
		{"identity deleted", func(t *testing.T) {
			if err := os.Remove(filepath.Join(dir, "IDENTITY")); err != nil {
				t.Fatal(err)
			}
		}, "no IDENTITY file"},
		{"identity of another cluster", func(t *testing.T) {
			if err := os.WriteFile(filepath.Join(dir, "IDENTITY"), otherIdentity(t), 0o644); err != nil {
				t.Fatal(err)
			}
		}, "belongs to another cluster"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			copyDir(t, pristine, dir)
			defer func() {
				if c.Running(victim) {
					if err := c.Kill(victim); err != nil {
						t.Error(err)
					}
				}
			}()
			tt.damage(t)
			err := c.Restart(ctx, victim)
			if tt.refuse != "" {
				if err == nil {
					t.Fatalf("node %d started on a directory with %s", victim, tt.name)
				}
				if !strings.Contains(err.Error(), tt.refuse) || !strings.Contains(err.Error(), "coord cluster remove") {
					t.Fatalf("node %d refused, but its message does not say %q and how to recover:\n%v", victim, tt.refuse, err)
				}
			} else if err != nil {
				t.Fatalf("node %d did not start: %v", victim, err)
			}
			// One vote per term: asked by another candidate in the term it
			// voted in, it refuses (or is not running to answer).
			granted, answered := asLeader.askVote(t, leader, victim, term, 3*time.Second)
			if granted {
				t.Fatalf("after %s, node %d granted a second vote in term %d (to %d, having voted for %d)", tt.name, victim, term, leader, other)
			}
			if tt.refuse == "" && !answered {
				t.Fatalf("after %s, node %d runs but did not answer a vote request", tt.name, victim)
			}
			if tt.name == "undamaged" {
				// The check can fail: in a new term the same request wins.
				if granted, _ := asLeader.askVote(t, leader, victim, term+1, 10*time.Second); !granted {
					t.Fatalf("node %d refused a vote in the fresh term %d: the check above proves nothing", victim, term+1)
				}
			}
		})
	}
}
