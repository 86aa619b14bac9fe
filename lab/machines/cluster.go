package machines

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"coord/lab"
	"coord/server/localcluster"
)

// selfServe is set by this package's tests, whose binary serves `server`
// itself (localcluster.ServeIfChild) instead of being the coord command.
var selfServe bool

// startCluster starts a cluster of real coord server processes for an
// experiment, each given args as extra flags (fastArgs for short ticks;
// none for coord's default timing), and waits for a leader.
func startCluster(ctx context.Context, env *lab.Env, nodes int, proxies bool, name string, args ...string) (*localcluster.Cluster, error) {
	dir, err := os.MkdirTemp(env.Dir, name+"-")
	if err != nil {
		return nil, err
	}
	// Insecure on purpose: these experiments measure consensus (elections,
	// partitions, quorums) on loopback, where TLS would add handshakes
	// and CPU to every figure and change none of the lessons. The cost of
	// TLS is measured on its own (coord cluster bench, docs/BENCHMARKS.md).
	c, err := localcluster.Start(ctx, localcluster.Config{Nodes: nodes, Dir: dir, Binary: env.Binary,
		SelfServe: selfServe, Proxies: proxies, Args: args, Insecure: true})
	if err != nil {
		return nil, err
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := c.WaitLeader(wctx); err != nil {
		c.Close()
		return nil, fmt.Errorf("%s: %w (logs in %s)", name, err, filepath.Join(dir, "node-*.log"))
	}
	return c, nil
}
