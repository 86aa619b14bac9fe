package node

import (
	"sync"

	"coord/raft"
)

// Transport carries a node's messages to its peers.
type Transport interface {
	// Send hands messages over for delivery and returns at once. It must
	// never block: a message to a slow, dead or unknown peer is dropped,
	// as a network drops packets (a blocking send wedged the articles'
	// cluster, Part 3). The messages must not be modified.
	Send(msgs []raft.Message)
}

// MemoryNetwork connects nodes in one process, for tests. Delivery is
// immediate, into the receiver's bounded inbox; links can be cut. It is
// safe for concurrent use.
type MemoryNetwork struct {
	mu    sync.Mutex
	nodes map[uint64]*Node
	cut   map[[2]uint64]bool
}

// NewMemoryNetwork returns an empty network.
func NewMemoryNetwork() *MemoryNetwork {
	return &MemoryNetwork{nodes: map[uint64]*Node{}, cut: map[[2]uint64]bool{}}
}

// Transport returns the Transport of node id on this network. Messages to
// id reach it once Attach has been called.
func (mn *MemoryNetwork) Transport(id uint64) Transport { return memoryTransport{mn, id} }

// Attach makes n receive the messages sent to its ID; Detach stops that.
func (mn *MemoryNetwork) Attach(n *Node) {
	mn.mu.Lock()
	defer mn.mu.Unlock()
	mn.nodes[n.ID()] = n
}

// Detach disconnects node id (a crash, as far as the others can tell).
func (mn *MemoryNetwork) Detach(id uint64) {
	mn.mu.Lock()
	defer mn.mu.Unlock()
	delete(mn.nodes, id)
}

// Cut drops messages from one node to another until Heal.
func (mn *MemoryNetwork) Cut(from, to uint64) {
	mn.mu.Lock()
	defer mn.mu.Unlock()
	mn.cut[[2]uint64{from, to}] = true
}

// Heal restores every link.
func (mn *MemoryNetwork) Heal() {
	mn.mu.Lock()
	defer mn.mu.Unlock()
	clear(mn.cut)
}

type memoryTransport struct {
	mn   *MemoryNetwork
	from uint64
}

func (t memoryTransport) Send(msgs []raft.Message) {
	for _, m := range msgs {
		t.mn.mu.Lock()
		to, ok := t.mn.nodes[m.To]
		cut := t.mn.cut[[2]uint64{t.from, m.To}]
		t.mn.mu.Unlock()
		if ok && !cut {
			to.Deliver(m) // never blocks: a full inbox drops
		}
	}
}
