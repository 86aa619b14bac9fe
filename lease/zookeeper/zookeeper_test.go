package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"coord/internal/leasekit/leasekittest"
	"coord/lease"
	"coord/lease/leasetest"
)

// ttl is the TTL of the conformance suite and the process checks: long
// enough for sessions on a loaded machine, whose client pings every third
// of it.
const ttl = time.Second

// coordBin is the coord command built by TestMain, for the tests that run
// real `coord elect` processes.
var coordBin string

func TestMain(m *testing.M) { os.Exit(leasekittest.MainWithCoord(m, &coordBin)) }

func serverURL(t *testing.T) string { return leasekittest.ServerURL(t, "COORD_TEST_ZOOKEEPER") }

func TestConformance(t *testing.T) {
	url := serverURL(t)
	leasetest.RunWithOptions(t, func(t *testing.T) lease.Backend { return leasekittest.Open(t, url) }, leasetest.Options{TTL: ttl, Duration: 5 * time.Second})
}

// Real `coord elect` processes: the leader killed (its session expires),
// terminated (it releases: the node goes at once), stopped (its client
// stops pinging, the session expires; on SIGCONT it reports lost).
func TestProcesses(t *testing.T) {
	leasetest.RunProcesses(t, coordBin, serverURL(t), leasetest.ProcessOptions{TTL: ttl})
}

// Cuts and partitions between a Backend and the server.
func TestNetworkFaults(t *testing.T) {
	leasekittest.RunFaults(t, serverURL(t))
}

// raw returns a zk connection of the test's own to the server at the
// store URL u (for setting up nodes the Backend must cope with), closed
// when the test ends, and ready.
func raw(t *testing.T, u string) *zk.Conn {
	t.Helper()
	parsed, err := url.Parse(u)
	if err != nil {
		t.Fatalf("parse %q: %v", u, err)
	}
	c, events, err := zk.Connect(strings.Split(parsed.Host, ","), 10*time.Second, zk.WithLogInfo(false))
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(c.Close)
	deadline := time.After(30 * time.Second)
	for {
		select {
		case ev := <-events:
			if ev.State == zk.StateHasSession {
				return c
			}
		case <-deadline:
			t.Fatalf("no session with %s", u)
		}
	}
}

// chroot creates a node of the test's own under the root, with acl, and
// returns the store URL with it as chroot.
func chroot(t *testing.T, c *zk.Conn, u string, acl []zk.ACL) string {
	t.Helper()
	path := "/" + leasekittest.Name(t)
	_, err := c.Create(path, nil, 0, acl)
	if err != nil {
		t.Fatalf("create %s: %v", path, err)
	}
	return strings.TrimSuffix(u, "/") + path
}

func TestBadURLs(t *testing.T) {
	leasekittest.OpenFails(t, lease.ErrInvalid,
		"zk:///chroot",
		"zk://127.0.0.1:1,,127.0.0.1:2/",
		"zk://127.0.0.1/",
		"zk://127.0.0.1:0/",
		"zk://127.0.0.1:1/a//b",
		"zk://127.0.0.1:1/a/",
		"zk://127.0.0.1:1/a/../b",
		"zk://127.0.0.1:1/?color=blue",
		"zk://127.0.0.1:1/?session_timeout=soon",
		"zk://127.0.0.1:1/?timeout=-1s",
		"zk://:secret@127.0.0.1:1/")
}

// No server listens: Open says so within its context (plus the second the
// zk client takes to give up), never hangs, and names the dial error.
func TestUnreachableEnsemble(t *testing.T) {
	start := time.Now()
	leasekittest.OpenFails(t, lease.ErrUnavailable, "zk://127.0.0.1:1,127.0.0.1:2/")
	if time.Since(start) >= 30*time.Second {
		t.Fatalf("Open of an unreachable ensemble took %v", time.Since(start))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_, err := lease.Open(ctx, "zk://127.0.0.1:1")
	if !(err != nil && strings.Contains(err.Error(), "connection refused") && !strings.Contains(err.Error(), "\n")) {
		t.Fatalf("error of an unreachable ensemble: want one line naming the refusal, got %v", err)
	}
}

func TestMissingChroot(t *testing.T) {
	u := strings.TrimSuffix(serverURL(t), "/") + "/" + leasekittest.Name(t) + "/leases"
	leasekittest.OpenFails(t, lease.ErrInvalid, u)
	_, err := lease.Open(context.Background(), u)
	if err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("error of a missing chroot: %v", err)
	}
}

// A chroot whose ACL refuses us fails Open, with a message that says who
// was refused; the user it admits opens, acquires, and its node is hidden
// from others.
func TestACLRefuses(t *testing.T) {
	u := serverURL(t)
	c := raw(t, u)
	owner := zk.DigestACL(zk.PermAll, "owner", "secret")
	locked := chroot(t, c, u, append(owner, zk.WorldACL(zk.PermRead)...))
	parsed, _ := url.Parse(locked)
	withUser := func(user, password string) string {
		p := *parsed
		p.User = url.UserPassword(user, password)
		return p.String()
	}
	for _, refused := range []string{locked, withUser("owner", "wrong"), withUser("other", "secret")} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		b, err := lease.Open(ctx, refused)
		cancel()
		if err == nil {
			b.Close()
		}
		if !errors.Is(err, lease.ErrInvalid) || !errors.Is(err, zk.ErrNoAuth) {
			t.Fatalf("Open(%s): want ErrInvalid and zk.ErrNoAuth, got %v", parsed.Redacted(), err)
		}
		if !strings.Contains(err.Error(), "refuses") {
			t.Fatalf("Open(%s): %v", parsed.Redacted(), err)
		}
	}

	b := leasekittest.Open(t, withUser("owner", "secret"))
	ctx, name := context.Background(), leasekittest.Name(t)
	a, err := b.Acquire(ctx, name, "a", 10*time.Second)
	if err != nil {
		t.Fatalf("Acquire as the owner: %v", err)
	}
	// Another client may see the chroot (world:anyone may read it), not
	// the lease node, which only its creator's user may read.
	_, _, err = c.Get(parsed.Path + "/" + name)
	if !errors.Is(err, zk.ErrNoAuth) {
		t.Fatalf("reading the lease node without the user: want zk.ErrNoAuth, got %v", err)
	}
	if err := b.Release(ctx, name, "a", a.Token); err != nil {
		t.Fatalf("Release: %v", err)
	}
}

// Nodes that coord did not write are ErrCorrupt, and left alone: a
// persistent node would never expire, an empty one names no holder.
func TestCorruptNodes(t *testing.T) {
	u := serverURL(t)
	c := raw(t, u)
	root := chroot(t, c, u, zk.WorldACL(zk.PermAll))
	b := leasekittest.Open(t, root)
	parsed, _ := url.Parse(root)
	ctx := context.Background()
	for _, n := range []struct {
		name  string
		data  []byte
		flags int32
	}{
		{"persistent", []byte("mallory"), 0},
		{"empty", nil, zk.FlagEphemeral},
		{"unterminated-mark", []byte("\x0012"), zk.FlagEphemeral},
		{"future-token", []byte("\x00999999999999\x00mallory"), zk.FlagEphemeral},
	} {
		path := parsed.Path + "/" + n.name
		_, err := c.Create(path, n.data, n.flags, zk.WorldACL(zk.PermAll))
		if err != nil {
			t.Fatalf("create %s: %v", path, err)
		}
		_, err = b.Get(ctx, n.name)
		if !errors.Is(err, lease.ErrCorrupt) {
			t.Fatalf("Get of %s: want ErrCorrupt, got %v", n.name, err)
		}
		_, err = b.Acquire(ctx, n.name, "a", 10*time.Second)
		if !errors.Is(err, lease.ErrCorrupt) {
			t.Fatalf("Acquire of %s: want ErrCorrupt, got %v", n.name, err)
		}
		data, _, err := c.Get(path)
		if err != nil || string(data) != string(n.data) {
			t.Fatalf("the node %s changed: %q, %v", n.name, data, err)
		}
	}
}

// A TTL longer than the server's maxSessionTimeout cannot be a session's
// timeout: Acquire refuses it rather than promise what the server will
// not keep.
func TestTTLAboveMaxSessionTimeout(t *testing.T) {
	b := leasekittest.Open(t, serverURL(t))
	_, err := b.Acquire(context.Background(), leasekittest.Name(t), "a", time.Hour)
	if !errors.Is(err, lease.ErrInvalid) || !strings.Contains(err.Error(), "maxSessionTimeout") {
		t.Fatalf("Acquire with a TTL above maxSessionTimeout: want ErrInvalid naming it, got %v", err)
	}
}

// A Renew for longer than the session was granted moves the node to a
// longer session, keeping the token; the node the watchers see changes
// session, not holder or token.
func TestRenewLongerRebinds(t *testing.T) {
	u := serverURL(t)
	b, other := leasekittest.Open(t, u), leasekittest.Open(t, u)
	ctx, name := context.Background(), leasekittest.Name(t)
	a, err := b.Acquire(ctx, name, "a", time.Second)
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	sent := time.Now()
	r, err := b.Renew(ctx, name, "a", a.Token, 20*time.Second)
	if err != nil || r.Token != a.Token {
		t.Fatalf("Renew for longer: %+v, %v", r, err)
	}
	if r.Expiry.Before(sent.Add(20 * time.Second)) {
		t.Fatalf("Expiry %v after renewing for 20s", r.Expiry.Sub(sent))
	}
	got, err := other.Get(ctx, name)
	if !(err == nil && got.Holder == "a" && got.Token == a.Token) {
		t.Fatalf("Get after rebinding: %+v, %v", got, err)
	}
	r, err = b.Renew(ctx, name, "a", a.Token, time.Second)
	if err != nil || r.Token != a.Token {
		t.Fatalf("Renew after rebinding: %+v, %v", r, err)
	}
	if err := b.Release(ctx, name, "a", a.Token); err != nil {
		t.Fatalf("Release: %v", err)
	}
	c, err := other.Acquire(ctx, name, "c", time.Second)
	if err != nil || c.Token <= a.Token {
		t.Fatalf("Acquire after a rebound tenure: token %d after %d, %v", c.Token, a.Token, err)
	}
}

// A Backend cannot renew or release a lease acquired through another: the
// lease lives in that Backend's session. It says so, rather than ErrLost
// (the token is current) or success (it cannot keep the session alive).
func TestForeignTenure(t *testing.T) {
	u := serverURL(t)
	b, other := leasekittest.Open(t, u), leasekittest.Open(t, u)
	ctx, name := context.Background(), leasekittest.Name(t)
	a, err := b.Acquire(ctx, name, "a", 10*time.Second)
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	_, err = other.Renew(ctx, name, "a", a.Token, 10*time.Second)
	if !errors.Is(err, lease.ErrInvalid) {
		t.Fatalf("Renew through another Backend: want ErrInvalid, got %v", err)
	}
	err = other.Release(ctx, name, "a", a.Token)
	if !errors.Is(err, lease.ErrInvalid) {
		t.Fatalf("Release through another Backend: want ErrInvalid, got %v", err)
	}
	got, err := other.Get(ctx, name)
	if err != nil || got.Token != a.Token {
		t.Fatalf("the lease after foreign calls: %+v, %v", got, err)
	}
}

// Invalid names and holders never reach the server.
func TestInvalidNames(t *testing.T) {
	b := leasekittest.Open(t, serverURL(t))
	ctx := context.Background()
	for _, name := range []string{"a/b", ".", "..", "tab\there", "zookeeper", strings.Repeat("n", 256)} {
		_, err := b.Acquire(ctx, name, "a", time.Second)
		if !errors.Is(err, lease.ErrInvalid) {
			t.Fatalf("Acquire(%q): want ErrInvalid, got %v", name, err)
		}
	}
	_, err := b.Acquire(ctx, leasekittest.Name(t), "\x00sneaky", time.Second)
	if !errors.Is(err, lease.ErrInvalid) {
		t.Fatalf("Acquire by a holder with NUL: want ErrInvalid, got %v", err)
	}
}

// zooConfig writes the config of a ZooKeeper of the test's own, as
// scripts/lib.sh's start_zookeeper does, and returns its path.
func zooConfig(t *testing.T, port int, extra ...string) string {
	dir := t.TempDir()
	lines := append([]string{
		"dataDir=" + filepath.Join(dir, "data"),
		fmt.Sprintf("clientPort=%d", port),
		"clientPortAddress=127.0.0.1",
		"tickTime=100",
		"minSessionTimeout=200",
		"maxSessionTimeout=120000",
		"admin.enableServer=false",
		"4lw.commands.whitelist=srvr",
		"maxClientCnxns=0",
	}, extra...)
	path := filepath.Join(dir, "zoo.cfg")
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatalf("write zoo.cfg: %v", err)
	}
	return path
}

// startServer starts a standalone ZooKeeper of the test's own, which it
// can kill and restart on the same port and data directory, and returns
// it, its URL and its data directory. It is up once a Backend opens on it.
func startServer(t *testing.T) (*leasekittest.Server, string, string) {
	t.Helper()
	java := leasekittest.LookPath(t, "COORD_TEST_ZOOKEEPER", "java")
	const jar = "/usr/share/java/zookeeper.jar"
	if _, err := os.Stat(jar); err != nil {
		serverURL(t)
		t.Fatalf("%s is missing (Debian's zookeeper package), though COORD_TEST_ZOOKEEPER is set: %v", jar, err)
	}
	port := leasekittest.FreePort(t)
	u := fmt.Sprintf("zk://127.0.0.1:%d", port)
	config := zooConfig(t, port)
	s := leasekittest.StartServer(t, leasekittest.ServerOptions{Port: port, Ready: leasekittest.Opens(u)}, java,
		"-Xmx256m", "-Dzookeeper.admin.enableServer=false", "-cp", jar,
		"org.apache.zookeeper.server.ZooKeeperServerMain", config)
	return s, u, filepath.Join(filepath.Dir(config), "data")
}

// A server killed and restarted keeps the node and its session: while it
// is down, operations fail with ErrUnavailable; afterwards the holder
// renews within its session, and the next token (a zxid, which the
// restarted server continues from its transaction log) is greater.
func TestServerRestart(t *testing.T) {
	s, u, _ := startServer(t)
	leasekittest.RestartKeepsLease(t, s, leasekittest.Open(t, u), func(ctx context.Context, renew func(context.Context) (lease.Record, error)) (lease.Record, error) {
		// The client reconnects on its own, pausing a second between
		// rounds of dials; each Renew waits for it up to the Backend's
		// 5 s timeout, and a loaded machine may need more than one.
		long, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		for {
			r, err := renew(long)
			if !errors.Is(err, lease.ErrUnavailable) || long.Err() != nil {
				return r, err
			}
		}
	})
}

// Ping, the reference round trip of `coord bench latency`, answers while
// the server does, and says ErrUnavailable when it cannot reach it.
func TestPing(t *testing.T) {
	b, p := leasekittest.Proxied(t, serverURL(t))
	pinger := b.(interface{ Ping(context.Context) error })
	if err := pinger.Ping(context.Background()); err != nil {
		t.Fatalf("Ping of a live server: %v", err)
	}
	p.Blackhole(true)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	err := pinger.Ping(ctx)
	if !errors.Is(err, lease.ErrUnavailable) {
		t.Fatalf("Ping while partitioned: want ErrUnavailable, got %v", err)
	}
}
