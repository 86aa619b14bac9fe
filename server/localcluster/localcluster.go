package localcluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"coord/api"
	"coord/client"
	"coord/internal/faultproxy"
	"coord/internal/freeport"
	"coord/server"
)

// ErrInvalid means a Config or an argument is out of range.
var ErrInvalid = errors.New("localcluster: invalid")

// Config configures a Cluster.
type Config struct {
	// Nodes is the number of initial nodes (IDs 1..Nodes).
	Nodes int
	// Dir holds each node's data directory (node-N) and log (node-N.log),
	// and cluster.json.
	Dir string
	// Binary is the program to run; Prefix comes before "server" in its
	// arguments (a test binary that serves `server` itself can use this).
	Binary string
	Prefix []string
	// Args are extra flags for every `coord server` (--tick 20ms).
	Args []string
	// Proxies puts a fault proxy between every pair of peers, so that
	// Partition works.
	Proxies bool
	// SelfServe says Binary is a test binary whose TestMain calls
	// ServeIfChild, rather than the coord command.
	SelfServe bool
	// Detach starts the nodes in their own sessions, to outlive this
	// process (`coord cluster up --detach`).
	Detach bool
	// Insecure runs the nodes with --insecure: no TLS, no tokens. By
	// default Start makes a CA, node and client certificates and an admin
	// token in Dir/tls (see TLSDir), and the nodes run with them.
	Insecure bool
	// BasePort, if not 0, fixes the nodes' ports instead of choosing free
	// ones (see NodeAddrs): node N's API listens on 127.0.0.1:BasePort+N,
	// its Raft transport on 127.0.0.1:BasePort+100+N. Node ids are then at
	// most 99, and a port already in use is an error, not a retry.
	BasePort int
}

// RaftPortOffset is how far above the API ports of a cluster with a
// BasePort its Raft ports are.
const RaftPortOffset = 100

// NodeAddrs returns the API and Raft addresses of node id in a cluster
// whose ports start at base (Config.BasePort).
func NodeAddrs(base int, id uint64) (httpAddr, peerAddr string, err error) {
	if base < 1 || id < 1 || id >= RaftPortOffset || base+RaftPortOffset+int(id) > 65535 {
		return "", "", fmt.Errorf("%w: base port %d and node %d: want node ids 1 to %d and ports up to 65535", ErrInvalid, base, id, RaftPortOffset-1)
	}
	return fmt.Sprintf("127.0.0.1:%d", base+int(id)), fmt.Sprintf("127.0.0.1:%d", base+RaftPortOffset+int(id)), nil
}

// checkFree returns an error naming the address if something listens on it.
func checkFree(addr, what string) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("%w: %s %s is not free (%v): choose another base port", ErrInvalid, what, addr, err)
	}
	return l.Close()
}

// Node is one member of the cluster.
type Node struct {
	ID uint64 `json:"id"`
	// Peer is the address its Raft transport listens on; HTTP its API.
	Peer string `json:"peer"`
	HTTP string `json:"http"`
	Data string `json:"data"`
	Log  string `json:"log"`
	PID  int    `json:"pid"`
	// Join is set for nodes added after the start.
	Join bool `json:"join,omitempty"`

	peers map[uint64]string // as this node is told them
	cmd   *exec.Cmd
	exit  chan struct{}
}

// Cluster is a running local cluster.
//
// Cluster is safe for concurrent use.
type Cluster struct {
	cfg Config
	// clusterID is every node's --cluster-id, recorded in its data
	// directory's identity and checked on every restart; a secure
	// cluster's certificates name the same id.
	clusterID string
	sec       *Security // nil: insecure
	access    Access
	// tokenReady is set once the leader accepted the admin token (the
	// first leader of a secure cluster makes it; see WaitLeader).
	tokenReady atomic.Bool

	mu      sync.Mutex
	nodes   map[uint64]*Node
	proxies map[[2]uint64]*faultproxy.Proxy
	cut     map[[2]uint64]bool
	holed   map[[2]uint64]bool
}

// freeAddr returns a loopback address with a port nothing listens on now,
// below the ephemeral range, so that a node restarted on its address does
// not find it taken by some client's connection (see internal/freeport).
// It is a variable so that a test can hand out a taken port.
var freeAddr = freeport.Addr

// errPortTaken means a node could not bind an address freeAddr chose: some
// other process took the port between the choice and the bind.
var errPortTaken = errors.New("localcluster: a chosen port was taken before the node bound it")

// startAttempts bounds how often Start picks new ports after errPortTaken.
const startAttempts = 3

// Start starts the cluster's nodes and waits until each answers on HTTP.
//
// Ports are chosen free and then bound by the node processes, so another
// process (a parallel test, say) can take one in between; Start then stops
// what it started, removes the nodes' files and tries again with new ports.
func Start(ctx context.Context, cfg Config) (*Cluster, error) {
	if cfg.Nodes < 1 || cfg.Dir == "" || cfg.Binary == "" {
		return nil, fmt.Errorf("%w: want Nodes >= 1, Dir and Binary (got %d, %q, %q)", ErrInvalid, cfg.Nodes, cfg.Dir, cfg.Binary)
	}
	// One id for the data directories' identities and the certificates.
	clusterID := fmt.Sprintf("%016x", rand.Uint64()|1)
	var sec *Security
	if !cfg.Insecure {
		var err error
		if sec, err = newSecurity(cfg.Dir, clusterID); err != nil {
			return nil, fmt.Errorf("localcluster: make the cluster's certificates: %w", err)
		}
	}
	acc, err := sec.Load()
	if err != nil {
		return nil, err
	}
	for attempt := 1; ; attempt++ {
		c, err := start(ctx, cfg, clusterID, sec, acc)
		if err == nil || !errors.Is(err, errPortTaken) || attempt == startAttempts || cfg.BasePort != 0 {
			return c, err
		}
	}
}

// start makes one attempt of Start. On failure it stops every node it
// started (detached or not) and, after errPortTaken, removes their files.
func start(ctx context.Context, cfg Config, clusterID string, sec *Security, acc Access) (*Cluster, error) {
	c := &Cluster{cfg: cfg, clusterID: clusterID, sec: sec, access: acc, nodes: map[uint64]*Node{},
		proxies: map[[2]uint64]*faultproxy.Proxy{}, cut: map[[2]uint64]bool{}, holed: map[[2]uint64]bool{}}
	err := c.startNodes(ctx)
	if err != nil {
		for _, id := range c.IDs() {
			_ = c.Stop(id)
		}
		c.Close()
		if errors.Is(err, errPortTaken) {
			for _, n := range c.sorted() {
				os.RemoveAll(n.Data)
				os.Remove(n.Log)
			}
		}
		return nil, err
	}
	return c, c.save()
}

func (c *Cluster) startNodes(ctx context.Context) error {
	for id := uint64(1); id <= uint64(c.cfg.Nodes); id++ {
		if _, err := c.newNode(id, false); err != nil {
			return err
		}
	}
	if err := c.wirePeers(); err != nil {
		return err
	}
	for _, n := range c.sorted() {
		if err := c.spawn(n); err != nil {
			return err
		}
	}
	for _, n := range c.sorted() {
		if err := c.waitHTTP(ctx, n); err != nil {
			return err
		}
	}
	return nil
}

func (c *Cluster) newNode(id uint64, join bool) (*Node, error) {
	peer, httpAddr, err := c.addrs(id)
	if err != nil {
		return nil, err
	}
	n := &Node{ID: id, Peer: peer, HTTP: httpAddr, Join: join,
		Data: filepath.Join(c.cfg.Dir, fmt.Sprintf("node-%d", id)),
		Log:  filepath.Join(c.cfg.Dir, fmt.Sprintf("node-%d.log", id))}
	if c.sec != nil {
		if err := c.sec.IssueNode(id, httpAddr); err != nil {
			return nil, err
		}
	}
	c.mu.Lock()
	c.nodes[id] = n
	c.mu.Unlock()
	return n, nil
}

// addrs returns the Raft and API addresses of a new node: fixed by the
// base port when there is one, else free ports.
func (c *Cluster) addrs(id uint64) (peer, httpAddr string, err error) {
	if c.cfg.BasePort == 0 {
		if peer, err = freeAddr(); err != nil {
			return "", "", err
		}
		httpAddr, err = freeAddr()
		return peer, httpAddr, err
	}
	if httpAddr, peer, err = NodeAddrs(c.cfg.BasePort, id); err != nil {
		return "", "", err
	}
	if err := checkFree(httpAddr, fmt.Sprintf("node %d's API address", id)); err != nil {
		return "", "", err
	}
	if err := checkFree(peer, fmt.Sprintf("node %d's Raft address", id)); err != nil {
		return "", "", err
	}
	return peer, httpAddr, nil
}

// directPeers returns every node's own Raft address; c.mu is held.
func (c *Cluster) directPeers() map[uint64]string {
	peers := map[uint64]string{}
	for _, m := range c.nodes {
		peers[m.ID] = m.Peer
	}
	return peers
}

// wirePeers gives every node its view of the others' addresses, through a
// proxy per pair when asked.
func (c *Cluster) wirePeers() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range c.nodes {
		n.peers = c.directPeers()
	}
	if !c.cfg.Proxies {
		return nil
	}
	for _, lo := range c.nodes {
		for _, hi := range c.nodes {
			if lo.ID >= hi.ID {
				continue
			}
			key := [2]uint64{lo.ID, hi.ID}
			p := c.proxies[key]
			if p == nil {
				var err error
				if p, err = faultproxy.New(hi.Peer); err != nil {
					return err
				}
				c.proxies[key] = p
			}
			lo.peers[hi.ID] = p.Addr() // lo dials hi, through the proxy
		}
	}
	return nil
}

func (c *Cluster) args(n *Node) []string {
	args := append(slices.Clone(c.cfg.Prefix), "server",
		"--id", strconv.FormatUint(n.ID, 10), "--listen", n.Peer, "--http", n.HTTP,
		"--peers", server.FormatPeers(n.peers), "--data", n.Data)
	if c.clusterID != "" {
		args = append(args, "--cluster-id", c.clusterID)
	}
	if n.Join {
		args = append(args, "--join")
	}
	args = append(args, c.sec.serverArgs(n.ID, n.Join)...)
	return append(args, c.cfg.Args...)
}

// spawn starts the node's process.
func (c *Cluster) spawn(n *Node) error {
	logFile, err := os.OpenFile(n.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("localcluster: node %d log: %w", n.ID, err)
	}
	defer logFile.Close()
	cmd := exec.Command(c.cfg.Binary, c.args(n)...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if c.cfg.SelfServe {
		cmd.Env = append(os.Environ(), childEnv+"=1")
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: !c.cfg.Detach, Setsid: c.cfg.Detach}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("localcluster: start node %d: %w", n.ID, err)
	}
	exit := make(chan struct{})
	c.mu.Lock()
	n.cmd, n.PID, n.exit = cmd, cmd.Process.Pid, exit
	c.mu.Unlock()
	go func() {
		_ = cmd.Wait()
		close(exit)
	}()
	return nil
}

// waitHTTP waits until the node answers /v1/status, or its process exits.
func (c *Cluster) waitHTTP(ctx context.Context, n *Node) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		if _, err := c.Status(ctx, n.ID); err == nil {
			return nil
		}
		select {
		case <-n.exit:
			log, _ := os.ReadFile(n.Log)
			err := fmt.Errorf("localcluster: node %d exited at start:\n%s", n.ID, tail(log, 2000))
			if bytes.Contains(log, []byte("address already in use")) {
				err = fmt.Errorf("%w: %w", errPortTaken, err)
			}
			return err
		case <-ctx.Done():
			return fmt.Errorf("localcluster: node %d not answering on %s: %w", n.ID, n.HTTP, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

func (c *Cluster) sorted() []*Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	nodes := make([]*Node, 0, len(c.nodes))
	for _, n := range c.nodes {
		nodes = append(nodes, n)
	}
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].ID < nodes[j].ID })
	return nodes
}

func (c *Cluster) node(id uint64) (*Node, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.nodes[id]
	if n == nil {
		return nil, fmt.Errorf("%w: no node %d", ErrInvalid, id)
	}
	return n, nil
}

// IDs returns the members' IDs, in order.
func (c *Cluster) IDs() []uint64 {
	var ids []uint64
	for _, n := range c.sorted() {
		ids = append(ids, n.ID)
	}
	return ids
}

// Nodes returns a copy of the members' descriptions.
func (c *Cluster) Nodes() []Node {
	var out []Node
	for _, n := range c.sorted() {
		c.mu.Lock()
		out = append(out, Node{ID: n.ID, Peer: n.Peer, HTTP: n.HTTP, Data: n.Data, Log: n.Log, PID: n.PID, Join: n.Join})
		c.mu.Unlock()
	}
	return out
}

// Endpoints returns the members' HTTP addresses, for client.Config.
func (c *Cluster) Endpoints() []string {
	var eps []string
	for _, n := range c.sorted() {
		eps = append(eps, n.HTTP)
	}
	return eps
}

// Running reports whether the node's process is alive (paused counts).
func (c *Cluster) Running(id uint64) bool {
	n, err := c.node(id)
	if err != nil || n.exit == nil {
		return false
	}
	select {
	case <-n.exit:
		return false
	default:
		return true
	}
}

// Kill sends SIGKILL to the node and waits for it to die. Its data
// directory stays, for Restart.
func (c *Cluster) Kill(id uint64) error { return c.signal(id, syscall.SIGKILL, true) }

// Stop sends SIGTERM and waits for a clean exit.
func (c *Cluster) Stop(id uint64) error { return c.signal(id, syscall.SIGTERM, true) }

// Pause stops the node's process with SIGSTOP: alive, silent, its timers
// frozen, as a long GC pause or a hung VM.
func (c *Cluster) Pause(id uint64) error { return c.signal(id, syscall.SIGSTOP, false) }

// Reload sends the node SIGHUP: it reloads its certificate files.
func (c *Cluster) Reload(id uint64) error { return c.signal(id, syscall.SIGHUP, false) }

// Resume continues a paused node with SIGCONT.
func (c *Cluster) Resume(id uint64) error { return c.signal(id, syscall.SIGCONT, false) }

func (c *Cluster) signal(id uint64, sig syscall.Signal, wait bool) error {
	n, err := c.node(id)
	if err != nil {
		return err
	}
	if !c.Running(id) {
		return nil
	}
	if sig == syscall.SIGTERM || sig == syscall.SIGKILL {
		_ = n.cmd.Process.Signal(syscall.SIGCONT) // a paused process must be able to die
	}
	if err := n.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("localcluster: signal node %d: %w", id, err)
	}
	if wait {
		select {
		case <-n.exit:
		case <-time.After(15 * time.Second):
			_ = n.cmd.Process.Kill()
			<-n.exit
		}
	}
	return nil
}

// Restart starts a stopped or killed node again, from its data directory,
// on the same addresses.
func (c *Cluster) Restart(ctx context.Context, id uint64) error {
	n, err := c.node(id)
	if err != nil {
		return err
	}
	if c.Running(id) {
		return fmt.Errorf("%w: node %d is running", ErrInvalid, id)
	}
	if err := c.spawn(n); err != nil {
		return err
	}
	if err := c.waitHTTP(ctx, n); err != nil {
		return err
	}
	return c.save()
}

// Partition cuts the network between the groups: every pair of nodes in
// different groups loses its connection, and reconnections are refused,
// until Heal. Nodes not named in any group keep all their links.
func (c *Cluster) Partition(groups ...[]uint64) error {
	return c.split(groups, func(key [2]uint64, p *faultproxy.Proxy) {
		p.Reject(true)
		p.Cut()
		c.cut[key] = true
	})
}

// Blackhole partitions the groups as a silent network does: connections
// between them stay open but carry nothing (bytes are held, as TCP holds
// them across a partition, and arrive after Heal), so senders find out
// only through their own timeouts.
func (c *Cluster) Blackhole(groups ...[]uint64) error {
	return c.split(groups, func(key [2]uint64, p *faultproxy.Proxy) {
		p.Blackhole(true)
		c.holed[key] = true
	})
}

// split calls fault, with c.mu held, on the proxy of every pair of nodes in
// different groups.
func (c *Cluster) split(groups [][]uint64, fault func(key [2]uint64, p *faultproxy.Proxy)) error {
	if !c.cfg.Proxies {
		return fmt.Errorf("%w: the cluster was started without proxies", ErrInvalid)
	}
	group := map[uint64]int{}
	for i, g := range groups {
		for _, id := range g {
			group[id] = i + 1
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for key, p := range c.proxies {
		a, b := group[key[0]], group[key[1]]
		if a != 0 && b != 0 && a != b {
			fault(key, p)
		}
	}
	return nil
}

// Isolate partitions one node from all the others.
func (c *Cluster) Isolate(id uint64) error {
	return c.Partition([]uint64{id}, c.Except(id))
}

// Except returns the members' IDs, in order, without the ones given.
func (c *Cluster) Except(ids ...uint64) []uint64 {
	var rest []uint64
	for _, id := range c.IDs() {
		if !slices.Contains(ids, id) {
			rest = append(rest, id)
		}
	}
	return rest
}

// Heal ends every partition.
func (c *Cluster) Heal() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for key := range c.cut {
		c.proxies[key].Reject(false)
		delete(c.cut, key)
	}
	for key := range c.holed {
		c.proxies[key].Blackhole(false)
		delete(c.holed, key)
	}
}

// Status asks one node for its status.
func (c *Cluster) Status(ctx context.Context, id uint64) (api.NodeStatus, error) {
	n, err := c.node(id)
	if err != nil {
		return api.NodeStatus{}, err
	}
	return StatusOf(ctx, n.HTTP, c.Access())
}

// ReloadAccess reads the cluster's CA and client files again, after they
// changed (a rotation), for the cluster's own requests and Access.
func (c *Cluster) ReloadAccess() error {
	acc, err := c.sec.Load()
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.access = acc
	c.mu.Unlock()
	return nil
}

// Access returns what a client needs to reach the cluster: its TLS
// configuration (the CA, and the client certificate) and the admin
// token; zero for an insecure cluster.
func (c *Cluster) Access() Access {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.access
}

// Security returns the cluster's certificate files, nil if insecure.
func (c *Cluster) Security() *Security { return c.sec }

// ClientConfig returns a client configuration for the cluster: its
// endpoints, TLS and admin token.
func (c *Cluster) ClientConfig() client.Config { return c.Access().ClientConfig(c.Endpoints()...) }

// WaitLeader waits until every node in among (all running nodes if empty)
// answers and names the same leader, itself one of them, and returns it.
// The first time, on a secure cluster, it also waits until the leader
// accepts the admin token, which the first leader makes just after its
// election: from then on the cluster serves the token.
func (c *Cluster) WaitLeader(ctx context.Context, among ...uint64) (uint64, error) {
	if len(among) == 0 {
		for _, id := range c.IDs() {
			if c.Running(id) {
				among = append(among, id)
			}
		}
	}
	for {
		leader, ok := c.agreedLeader(ctx, among)
		if ok && c.tokenAccepted(ctx, leader) {
			return leader, nil
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("localcluster: no agreed leader among %v: %w", among, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// tokenAccepted reports whether the admin token is known to the cluster,
// asking leader if that was never seen; true on an insecure cluster.
func (c *Cluster) tokenAccepted(ctx context.Context, leader uint64) bool {
	if c.sec == nil || c.tokenReady.Load() {
		return true
	}
	n, err := c.node(leader)
	if err != nil {
		return false
	}
	cfg := c.Access().ClientConfig(n.HTTP)
	cfg.AttemptTimeout = time.Second
	cl, err := client.New(cfg)
	if err != nil {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if _, err := cl.Tokens(ctx); err != nil {
		return false
	}
	c.tokenReady.Store(true)
	return true
}

func (c *Cluster) agreedLeader(ctx context.Context, among []uint64) (uint64, bool) {
	var leader uint64
	for _, id := range among {
		st, err := c.Status(ctx, id)
		if err != nil || st.Leader == 0 || (leader != 0 && st.Leader != leader) {
			return 0, false
		}
		leader = st.Leader
	}
	return leader, leader != 0 && slices.Contains(among, leader)
}

// Add starts a new node that joins the cluster (started with --join), and
// returns it; the caller then adds it to the membership (AddMember). The
// new node gets no proxies.
func (c *Cluster) Add(ctx context.Context, id uint64) (*Node, error) {
	if _, err := c.node(id); err == nil {
		return nil, fmt.Errorf("%w: node %d exists", ErrInvalid, id)
	}
	n, err := c.newNode(id, true)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	n.peers = c.directPeers()
	c.mu.Unlock()
	if err := c.spawn(n); err != nil {
		return nil, err
	}
	if err := c.waitHTTP(ctx, n); err != nil {
		return nil, err
	}
	return n, c.save()
}

// File is the name of the file in Dir that describes a running cluster.
const File = "cluster.json"

// Info is what cluster.json holds.
type Info struct {
	Nodes []Node `json:"nodes"`
	// ClusterID is the nodes' --cluster-id.
	ClusterID string `json:"cluster_id,omitempty"`
	// Security names the certificate and token files of a secure
	// cluster; nil for an insecure one.
	Security *Security `json:"security,omitempty"`
	// BasePort is the cluster's Config.BasePort: nodes added later take
	// their ports from it too.
	BasePort int `json:"base_port,omitempty"`
}

func (c *Cluster) save() error {
	return writeInfo(c.cfg.Dir, Info{Nodes: c.Nodes(), ClusterID: c.clusterID, Security: c.sec, BasePort: c.cfg.BasePort})
}

// ClusterID returns the cluster's ID (the nodes' --cluster-id).
func (c *Cluster) ClusterID() string { return c.clusterID }

// Load reads the cluster.json of a cluster started in dir.
func Load(dir string) (Info, error) {
	var info Info
	b, err := os.ReadFile(filepath.Join(dir, File))
	if err != nil {
		return info, fmt.Errorf("localcluster: no cluster in %s (start one with coord cluster up): %w", dir, err)
	}
	if err := json.Unmarshal(b, &info); err != nil {
		return info, fmt.Errorf("localcluster: %s: %w", filepath.Join(dir, File), err)
	}
	return info, nil
}

// Close stops every node (SIGTERM, then SIGKILL) unless the cluster was
// started detached, and closes the proxies.
func (c *Cluster) Close() {
	if !c.cfg.Detach {
		var wg sync.WaitGroup
		for _, id := range c.IDs() {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_ = c.Stop(id)
			}()
		}
		wg.Wait()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.proxies {
		p.Close()
	}
}
