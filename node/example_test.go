package node_test

import (
	"context"
	"fmt"
	"time"

	"coord/node"
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
