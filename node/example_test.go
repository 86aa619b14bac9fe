package node_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"coord/node"
	"coord/raft"
)

// counter is a state machine that adds up the commands' lengths.
type counter struct{ total int }

func (c *counter) Apply(_ uint64, data []byte) any { c.total += len(data); return c.total }
func (c *counter) Snapshot() ([]byte, error)       { return fmt.Appendf(nil, "%d", c.total), nil }
func (c *counter) Restore(data []byte) error {
	_, err := fmt.Sscanf(string(data), "%d", &c.total)
	return err
}

// Example starts a single-node cluster on the in-memory network, makes it
// leader, and replicates two commands.
func Example() {
	network := node.NewMemoryNetwork()
	cfg := node.DefaultConfig()
	cfg.Raft.ID = 1
	cfg.Raft.Peers = []uint64{1}
	cfg.Storage = node.NewMemoryStorage()
	cfg.Transport = network.Transport(1)
	cfg.StateMachine = &counter{}
	cfg.TickInterval = time.Millisecond
	n, err := node.Start(cfg)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer n.Stop()
	network.Attach(n)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := n.Campaign(ctx); err != nil {
		fmt.Println(err)
		return
	}
	for _, cmd := range []string{"hello", "world!"} {
		total, err := n.Propose(ctx, []byte(cmd))
		fmt.Println(total, err)
	}
	// Output:
	// 5 <nil>
	// 11 <nil>
}

// ExampleHandler drives a single-node cluster step by step, with no
// goroutine and no clock, as the simulator does: the caller ticks it, hands
// it requests, and has it do the Readies after each.
func ExampleHandler() {
	cfg := raft.DefaultConfig()
	cfg.ID = 1
	cfg.Peers = []uint64{1}
	cfg.Rand = rand.New(rand.NewPCG(1, 1))
	h, err := node.NewHandler(node.HandlerConfig{
		Raft:         cfg,
		Storage:      node.NewMemoryStorage(),
		Transport:    node.NewMemoryNetwork().Transport(1), // no peers to reach
		StateMachine: &counter{},
		Hooks: node.Hooks{Persisted: func(rd raft.Ready) {
			if rd.SoftState != nil {
				fmt.Println("now", rd.SoftState.Role)
			}
		}},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	for h.Core().Status().Role != raft.Leader {
		_ = h.Tick() // an election timeout, in ticks
		_ = h.Handle()
	}
	for _, cmd := range []string{"hello", "world!"} {
		err := h.Propose([]byte(cmd), func(r node.Result) { fmt.Println("applied at", r.Index, "total", r.Value, r.Err) })
		if err != nil {
			fmt.Println(err)
		}
		_ = h.Handle()
	}
	// Output:
	// now leader
	// applied at 3 total 5 <nil>
	// applied at 4 total 11 <nil>
}
