package rafttest

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"

	"coord/node"
	"coord/raft"
)

// Node is one member of a Network: its core, driven by the production
// Ready handler (node.Handler), its storage (whatever is in it survives a
// crash) and what it applied.
type Node struct {
	ID   uint64
	Core *raft.Core
	// Handler does the core's Readies, as it does in a server: it
	// persists to Storage, queues the messages on the Network, applies,
	// and records the membership the core worked out.
	Handler *node.Handler
	Storage *raft.MemoryStorage
	// Applied holds the data of the normal entries applied, by index.
	Applied map[uint64][]byte
	// ReadStates collects the reads served, in the order served.
	ReadStates []raft.ReadState
	crashed    bool
}

// Network is a set of cores joined by an in-memory message queue that
// delivers only when told to. It is not safe for concurrent use.
type Network struct {
	// Config returns the configuration for a node; NewNetwork sets it to
	// a deterministic default.
	Config func(id uint64) raft.Config
	Nodes  map[uint64]*Node
	// Queue holds sent, undelivered messages in send order.
	Queue []raft.Message
	// Out receives a line per event (state changes, deliveries); nil for
	// none.
	Out io.Writer
	// Quiet omits deliveries from Out (state changes are still written).
	Quiet bool
	// cut holds one-way links that drop messages: cut[[2]uint64{from, to}].
	cut map[[2]uint64]bool
	// inv remembers what the cores did, for Check.
	inv *invariants
}

// DefaultConfig is the configuration NewNetwork gives node id: election
// timeouts of 10 to 19 ticks, heartbeats every tick, pre-vote and
// check-quorum on, and a random source seeded by the ID.
func DefaultConfig(id uint64) raft.Config {
	cfg := raft.DefaultConfig()
	cfg.ID = id
	cfg.Rand = rand.New(rand.NewPCG(id, 0x5eed))
	return cfg
}

// NewNetwork returns a network without nodes.
func NewNetwork() *Network {
	return &Network{Config: DefaultConfig, Nodes: map[uint64]*Node{}, cut: map[[2]uint64]bool{}}
}

// Bootstrap starts a new cluster whose voters are ids.
func (n *Network) Bootstrap(ids ...uint64) error {
	for _, id := range ids {
		if err := n.start(id, ids, raft.NewMemoryStorage()); err != nil {
			return err
		}
	}
	return nil
}

// AddNode starts a node with empty storage that joins an existing cluster:
// it waits to be contacted by a leader.
func (n *Network) AddNode(id uint64) error { return n.start(id, nil, raft.NewMemoryStorage()) }

func (n *Network) start(id uint64, peers []uint64, storage *raft.MemoryStorage) error {
	old, ok := n.Nodes[id]
	if ok && !old.crashed {
		return fmt.Errorf("node %d already runs", id)
	}
	nd := &Node{ID: id, Storage: storage, Applied: map[uint64][]byte{}}
	if ok {
		// The state machine is rebuilt from the snapshot and the log;
		// keep what was applied before for the checks that compare.
		nd.Applied = old.Applied
	}
	cfg := n.Config(id)
	cfg.ID = id
	cfg.Peers = peers
	h, err := node.NewHandler(node.HandlerConfig{
		Raft:         cfg,
		Storage:      node.MemoryStorage{MemoryStorage: storage},
		Transport:    queue{n},
		StateMachine: machine{nd},
		Hooks:        n.hooks(nd),
	})
	if err != nil {
		return err
	}
	nd.Handler, nd.Core = h, h.Core()
	n.Nodes[id] = nd
	return nil
}

// hooks write what a node's handler does to Out, and record the node's
// state for the safety checks after each Ready.
func (n *Network) hooks(nd *Node) node.Hooks {
	return node.Hooks{
		Persisted: func(rd raft.Ready) {
			if rd.SoftState != nil {
				n.printf("node %d is %v at term %d (leader %d)", nd.ID, rd.SoftState.Role, nd.Core.Status().Term, rd.SoftState.Lead)
			}
			n.observe(nd)
		},
		Applied: func(e raft.Entry) {
			if e.Type == raft.EntryNormal && len(e.Data) > 0 {
				n.printf("node %d applied %d/%d %q", nd.ID, e.Index, e.Term, e.Data)
			}
		},
		ConfChanged: func(c raft.CommittedConfChange) {
			n.printf("node %d applied %d/%d membership %v", nd.ID, c.Index, c.Term, c.Conf)
		},
		SnapshotInstalled: func(meta raft.SnapshotMetadata) {
			n.printf("node %d installed snapshot %d/%d", nd.ID, meta.Index, meta.Term)
		},
	}
}

// queue is a node's transport: it queues the messages on the Network.
type queue struct{ n *Network }

func (q queue) Send(msgs []raft.Message) { q.n.Queue = append(q.n.Queue, msgs...) }

// machine is a node's state machine: it records the data applied, and its
// snapshot lists the commands applied, comma-separated. A snapshot from the
// leader restores nothing: Applied keeps what this node applied itself.
type machine struct{ nd *Node }

func (m machine) Apply(index uint64, data []byte) any {
	m.nd.Applied[index] = data
	return nil
}

func (m machine) Snapshot() ([]byte, error) {
	var data []string
	for i := uint64(1); i <= m.nd.Handler.Applied(); i++ {
		if d, ok := m.nd.Applied[i]; ok {
			data = append(data, string(d))
		}
	}
	return []byte(strings.Join(data, ",")), nil
}

func (machine) Restore([]byte) error { return nil }

// Crash stops node id: its core and undelivered messages to it are lost,
// its storage is kept.
func (n *Network) Crash(id uint64) error {
	nd, err := n.Node(id)
	if err != nil {
		return err
	}
	nd.crashed = true
	nd.Handler.Stop(errCrashed)
	n.Queue = slices.DeleteFunc(n.Queue, func(m raft.Message) bool { return m.To == id })
	return nil
}

// Restart starts a crashed node again from its storage.
func (n *Network) Restart(id uint64) error {
	node, ok := n.Nodes[id]
	if !ok || !node.crashed {
		return fmt.Errorf("node %d is not crashed", id)
	}
	return n.start(id, nil, node.Storage)
}

// Node returns the running node id, or an error.
func (n *Network) Node(id uint64) (*Node, error) {
	node, ok := n.Nodes[id]
	if !ok {
		return nil, fmt.Errorf("no node %d", id)
	}
	if node.crashed {
		return nil, fmt.Errorf("node %d is crashed", id)
	}
	return node, nil
}

// IDs returns the IDs of all nodes, running or not, in order.
func (n *Network) IDs() []uint64 {
	ids := make([]uint64, 0, len(n.Nodes))
	for id := range n.Nodes {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// Cut drops messages from one node to another until Heal.
func (n *Network) Cut(from, to uint64) { n.cut[[2]uint64{from, to}] = true }

// Isolate cuts every link to and from id.
func (n *Network) Isolate(id uint64) {
	for _, other := range n.IDs() {
		if other != id {
			n.Cut(id, other)
			n.Cut(other, id)
		}
	}
}

// Heal restores every link.
func (n *Network) Heal() { clear(n.cut) }

func (n *Network) printf(format string, args ...any) {
	if n.Out != nil {
		fmt.Fprintf(n.Out, format+"\n", args...)
	}
}

func (n *Network) printDelivery(format string, args ...any) {
	if !n.Quiet {
		n.printf(format, args...)
	}
}

// Process has the handler of every running node that has work do it, in
// ID order. It reports whether any node had work.
func (n *Network) Process() (bool, error) {
	worked := false
	for _, id := range n.IDs() {
		nd := n.Nodes[id]
		if !nd.crashed && nd.Core.HasReady() {
			worked = true
			if err := nd.Handler.Handle(); err != nil {
				return worked, err
			}
		}
	}
	return worked, nil
}

// Deliver processes readies, then delivers the queued messages that match
// filter (nil: all), in order; the rest stay queued. It returns how many it
// delivered.
func (n *Network) Deliver(filter func(raft.Message) bool) (int, error) {
	if _, err := n.Process(); err != nil {
		return 0, err
	}
	var keep []raft.Message
	delivered := 0
	batch := n.Queue
	n.Queue = nil
	for i, m := range batch {
		if filter != nil && !filter(m) {
			keep = append(keep, m)
			continue
		}
		delivered++
		if err := n.deliver(m); err != nil {
			n.Queue = append(append(keep, batch[i+1:]...), n.Queue...)
			return delivered, err
		}
	}
	n.Queue = append(keep, n.Queue...)
	_, err := n.Process()
	return delivered, err
}

func (n *Network) deliver(m raft.Message) error {
	to, ok := n.Nodes[m.To]
	switch {
	case !ok || to.crashed:
		n.printDelivery("%v (dropped: node %d is down)", m, m.To)
		return nil
	case n.cut[[2]uint64{m.From, m.To}]:
		n.printDelivery("%v (dropped: link cut)", m)
		return nil
	}
	n.printDelivery("%v", m)
	if err := to.Handler.Step(m); err != nil {
		return err
	}
	return to.Handler.Handle()
}

// errCrashed is what a crashed node's handler is stopped with.
var errCrashed = errors.New("rafttest: node crashed")

// ErrNotStable means Stabilize gave up: messages kept flowing.
var ErrNotStable = errors.New("rafttest: network did not stabilize")

// Stabilize delivers messages until none are left, at most maxRounds
// rounds.
func (n *Network) Stabilize(maxRounds int) error {
	for range maxRounds {
		if _, err := n.Process(); err != nil {
			return err
		}
		if len(n.Queue) == 0 {
			return nil
		}
		if _, err := n.Deliver(nil); err != nil {
			return err
		}
	}
	return fmt.Errorf("%w after %d rounds", ErrNotStable, maxRounds)
}

// Tick ticks node id count times, processing its Ready after each tick.
func (n *Network) Tick(id uint64, count int) error {
	node, err := n.Node(id)
	if err != nil {
		return err
	}
	for range count {
		if err := node.Handler.Tick(); err != nil {
			return err
		}
		if err := node.Handler.Handle(); err != nil {
			return err
		}
	}
	return nil
}

// Leader returns the ID of a running node that is leader in the highest
// term among leaders, or 0.
func (n *Network) Leader() uint64 {
	var lead, term uint64
	for _, id := range n.IDs() {
		node := n.Nodes[id]
		if node.crashed {
			continue
		}
		if st := node.Core.Status(); st.Role == raft.Leader && st.Term >= term {
			lead, term = id, st.Term
		}
	}
	return lead
}

// StatusLine describes a node in one line.
func (n *Network) StatusLine(id uint64) string {
	node := n.Nodes[id]
	if node.crashed {
		return fmt.Sprintf("%d: crashed", id)
	}
	st := node.Core.Status()
	return fmt.Sprintf("%d: %v term=%d vote=%d lead=%d commit=%d applied=%d last=%d %v",
		id, st.Role, st.Term, st.Vote, st.Lead, st.Commit, st.Applied, st.LastIndex, st.Conf)
}

// LogLine describes a node's stored log in one line: index/term, with
// normal entries' data quoted.
func (n *Network) LogLine(id uint64) string {
	node := n.Nodes[id]
	first, _ := node.Storage.FirstIndex()
	last, _ := node.Storage.LastIndex()
	entries, _ := node.Storage.Entries(first, last+1, 0)
	parts := []string{fmt.Sprintf("%d: first=%d", id, first)}
	for _, e := range entries {
		s := fmt.Sprintf("%d/%d", e.Index, e.Term)
		switch {
		case e.Type == raft.EntryConfChange:
			s += ":conf"
		case len(e.Data) > 0:
			s += fmt.Sprintf(":%q", e.Data)
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, " ")
}

// Compact takes a snapshot of node id at its applied index and discards the
// log up to it. The snapshot's data lists the applied commands.
func (n *Network) Compact(id uint64) error {
	nd, err := n.Node(id)
	if err != nil {
		return err
	}
	return nd.Handler.Compact()
}
