package localcluster

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"hash/crc32"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"coord/api"
	"coord/client"
	"coord/internal/pki"
	"coord/internal/wire"
	"coord/raft"
	"coord/server"
	"coord/transport/tcp"
)

// The outsider's attacks on the peer port, against real coord server
// processes. The outsider writes frames from the format documented in
// transport/tcp's package doc, as anyone could, without its code.

// frame encodes one transport frame: length, type, payload, CRC-32C.
func frame(typ byte, payload []byte) []byte {
	body := append([]byte{typ}, payload...)
	b := binary.BigEndian.AppendUint32(nil, uint32(len(body)))
	b = append(b, body...)
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(body, crc32.MakeTable(crc32.Castagnoli)))
}

// helloFrame claims to be node from, calling node to.
func helloFrame(from, to uint64) []byte {
	e := wire.Encoder{}
	e.Buf = append(e.Buf, "coordtp"...)
	e.Uvarint(tcp.ProtocolVersion) // the version the nodes speak: the attacks are on what follows
	e.Uvarint(from)
	e.Uvarint(to)
	e.String("")
	return frame(1, e.Buf)
}

// messageFrame encodes a raft message (no snapshot) as the doc says.
func messageFrame(m raft.Message) []byte {
	e := wire.Encoder{}
	e.Byte(byte(m.Type))
	for _, v := range []uint64{m.From, m.To, m.Term, m.LogIndex, m.LogTerm, m.Commit} {
		e.Uvarint(v)
	}
	e.Bool(m.Reject)
	e.Uvarint(m.HintIndex)
	e.Uvarint(m.HintTerm)
	e.Uvarint(m.ReadRound)
	e.Bool(m.Transfer)
	e.Uvarint(m.Lead) // since protocol version 3
	e.Uvarint(uint64(len(m.Entries)))
	for _, ent := range m.Entries {
		e.Uvarint(ent.Term)
		e.Uvarint(ent.Index)
		e.Byte(byte(ent.Type))
		e.Bytes(ent.Data)
	}
	e.Uvarint(0) // snapshot index
	e.Uvarint(0) // snapshot term
	for range 3 {
		e.Uvarint(0) // voters, learners, outgoing voters
	}
	return frame(3, e.Buf)
}

// forgeries are what the outsider sends as node 2 to node to, knowing
// the cluster's term and last index: a heartbeat 1000 terms ahead, and an
// append 5 terms ahead that carries a write of its own.
func forgeries(to uint64, st api.NodeStatus) []byte {
	put := server.Command{Op: server.OpPut, Key: "target", Value: []byte("outsider")}.Marshal()
	b := helloFrame(2, to)
	b = append(b, messageFrame(raft.Message{Type: raft.MsgHeartbeatRequest, From: 2, To: to, Term: st.Term + 1000, Commit: st.Commit})...)
	b = append(b, messageFrame(raft.Message{Type: raft.MsgAppendRequest, From: 2, To: to, Term: st.Term + 5,
		LogIndex: st.Commit, LogTerm: st.Term, Commit: st.Commit + 1,
		Entries: []raft.Entry{{Term: st.Term + 5, Index: st.Commit + 1, Type: raft.EntryNormal, Data: put}}})...)
	return b
}

// attack dials addr (through TLS if conf is not nil), sends the
// forgeries, and waits until the node closes the connection.
func attack(t *testing.T, addr string, conf *tls.Config, to uint64, st api.NodeStatus) {
	t.Helper()
	raw, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	c := raw
	if conf != nil {
		c = tls.Client(raw, conf)
	}
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	_, _ = c.Write(forgeries(to, st)) // may fail once the node has refused
	buf := make([]byte, 4096)
	for {
		if _, err := c.Read(buf); err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				t.Fatal("the node did not close the outsider's connection")
			}
			return
		}
	}
}

// outsider is a TLS dialer presenting the certificate in certFile (none
// if empty) and trusting any acceptor.
func outsider(t *testing.T, certFile, keyFile string) *tls.Config {
	t.Helper()
	conf := &tls.Config{MinVersion: tls.VersionTLS13, InsecureSkipVerify: true}
	if certFile != "" {
		pair, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			t.Fatal(err)
		}
		conf.Certificates = []tls.Certificate{pair}
	}
	return conf
}

// waitLog waits until node id's log says text.
func waitLog(t *testing.T, c *Cluster, id uint64, text string) {
	t.Helper()
	n, _ := c.node(id)
	deadline := time.Now().Add(30 * time.Second)
	for {
		b, _ := os.ReadFile(n.Log)
		if strings.Contains(string(b), text) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("node %d never logged %q:\n%s", id, text, tail(b, 3000))
		}
		time.Sleep(20 * time.Millisecond) // another process's log: nothing to wait on but reading it
	}
}

func snapshotStatus(t *testing.T, ctx context.Context, c *Cluster) map[uint64]api.NodeStatus {
	t.Helper()
	out := map[uint64]api.NodeStatus{}
	for _, id := range c.IDs() {
		st, err := c.Status(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		out[id] = st
	}
	return out
}

// TestOutsidersCannotSpeakForANode runs the attacks of issue 10 against a
// secure cluster: a plaintext hello, a TLS hello without a certificate,
// a certificate of another CA, the cluster's own client certificate on
// the peer port, and node 3's certificate claiming to be node 2, each
// followed by a forged heartbeat and append. Each is refused and logged,
// and the cluster's term, log and data do not move. The same forgeries
// against an --insecure cluster raise its term: the attack is real.
func TestOutsidersCannotSpeakForANode(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// Slow elections (2 to 4 s): a loaded machine must not change the
	// term on its own while the test watches it stand still.
	c, err := Start(ctx, Config{Nodes: 3, Dir: t.TempDir(), Binary: os.Args[0], SelfServe: true,
		Args: []string{"--tick", "100ms", "--election-ticks", "20"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	if _, err := c.WaitLeader(ctx); err != nil {
		t.Fatal(err)
	}
	cl, err := client.New(c.ClientConfig())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Put(ctx, "target", []byte("owner")); err != nil {
		t.Fatal(err)
	}
	sec := c.Security()
	// Another CA naming the same cluster, with a node 2 certificate.
	foreignCA, err := pki.NewCA(sec.Cluster, time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	foreign, err := foreignCA.Issue(pki.Request{Identity: pki.NodeIdentity(sec.Cluster, 2), Server: true, Client: true}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	fdir := t.TempDir()
	if err := foreign.Save(filepath.Join(fdir, "n2.crt"), filepath.Join(fdir, "n2.key")); err != nil {
		t.Fatal(err)
	}
	node3Cert, node3Key := sec.NodeFiles(3)
	waitSettled(t, ctx, c)
	before := snapshotStatus(t, ctx, c)
	target := c.Nodes()[0] // node 1
	for _, a := range []struct {
		name string
		conf *tls.Config
		log  string
	}{
		{"plaintext", nil, `reason="tls handshake"`},
		{"no certificate", outsider(t, "", ""), "client didn't provide a certificate"},
		{"another CA", outsider(t, filepath.Join(fdir, "n2.crt"), filepath.Join(fdir, "n2.key")), "certificate signed by unknown authority"},
		{"client certificate on the peer port", outsider(t, sec.Cert, sec.Key), "which is not a node"},
		{"node 3 claiming to be node 2", outsider(t, node3Cert, node3Key), "hello claims another node than its certificate names"},
	} {
		t.Run(a.name, func(t *testing.T) {
			attack(t, target.Peer, a.conf, target.ID, before[target.ID])
			waitLog(t, c, target.ID, a.log)
		})
	}
	after := snapshotStatus(t, ctx, c)
	for id, b := range before {
		a := after[id]
		if a.Term != b.Term || a.Commit != b.Commit || a.Leader != b.Leader {
			t.Errorf("node %d moved: term %d -> %d, commit %d -> %d, leader %d -> %d", id, b.Term, a.Term, b.Commit, a.Commit, b.Leader, a.Leader)
		}
	}
	kv, err := cl.Get(ctx, "target")
	if err != nil || string(kv.Value) != "owner" {
		t.Fatalf("target after the attacks: %q, %v", kv.Value, err)
	}
}

// waitSettled waits until every node has applied the same commit index
// (the leader's first entries and the admin token are in).
func waitSettled(t *testing.T, ctx context.Context, c *Cluster) {
	t.Helper()
	for {
		sts := snapshotStatus(t, ctx, c)
		var commits []uint64
		for _, st := range sts {
			commits = append(commits, st.Commit, st.Applied)
		}
		same := true
		for _, x := range commits {
			same = same && x == commits[0]
		}
		if same {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the cluster never settled: %v", sts)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// TestInsecureClusterTakesTheForgeries is the control: the same forged
// frames, sent in plaintext to an --insecure cluster, are taken as node
// 2's and raise the term by 1000. Without it, the test above could pass
// with forgeries no node would ever act on.
func TestInsecureClusterTakesTheForgeries(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := Start(ctx, Config{Nodes: 3, Dir: t.TempDir(), Binary: os.Args[0], SelfServe: true, Insecure: true,
		Args: []string{"--tick", "100ms", "--election-ticks", "20"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	if _, err := c.WaitLeader(ctx); err != nil {
		t.Fatal(err)
	}
	before := snapshotStatus(t, ctx, c)
	target := c.Nodes()[0]
	raw, err := net.DialTimeout("tcp", target.Peer, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	if _, err := raw.Write(forgeries(target.ID, before[target.ID])); err != nil {
		t.Fatal(err)
	}
	for {
		st, err := c.Status(ctx, target.ID)
		if err == nil && st.Term >= before[target.ID].Term+1000 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the forged heartbeat did not raise node 1's term: %+v %v", st, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
