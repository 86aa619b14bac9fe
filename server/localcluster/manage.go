package localcluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"coord/api"
	"coord/client"
)

// These functions manage a cluster described by a cluster.json, from a
// process other than the one that started it (`coord cluster add`,
// `remove`, `down`).

// ownsPID reports whether pid is still the node process that Load
// described: its command line names the node's data directory. A PID that
// was reused by another program is never signalled.
func ownsPID(n Node) bool {
	if n.PID <= 0 {
		return false
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", n.PID))
	if err != nil {
		return false
	}
	return bytes.Contains(cmdline, []byte(n.Data))
}

// writeInfo replaces dir's cluster.json by info, atomically.
func writeInfo(dir string, info Info) error {
	b, err := json.MarshalIndent(info, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, File+".tmp")
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("localcluster: %w", err)
	}
	return os.Rename(tmp, filepath.Join(dir, File))
}

// AddNode starts node id (binary and prefix as in Config) in its own
// session, joined to the cluster in dir, and adds it to the membership: as
// a learner, then as a voter once it caught up. It returns the new node.
func AddNode(ctx context.Context, dir, binary string, prefix []string, selfServe bool, id uint64, extraArgs []string) (Node, error) {
	info, err := Load(dir)
	if err != nil {
		return Node{}, err
	}
	acc, err := info.Security.Load()
	if err != nil {
		return Node{}, err
	}
	c := &Cluster{cfg: Config{Dir: dir, Binary: binary, Prefix: prefix, SelfServe: selfServe, Detach: true, Args: extraArgs,
		Insecure: info.Security == nil, BasePort: info.BasePort}, clusterID: info.ClusterID, sec: info.Security, access: acc, nodes: map[uint64]*Node{}}
	var endpoints []string
	for i := range info.Nodes {
		n := info.Nodes[i]
		if n.ID == id {
			return Node{}, fmt.Errorf("%w: node %d is already in %s", ErrInvalid, id, filepath.Join(dir, File))
		}
		c.nodes[n.ID] = &n
		endpoints = append(endpoints, n.HTTP)
	}
	n, err := c.Add(ctx, id)
	if err != nil {
		return Node{}, err
	}
	cl, err := client.New(acc.ClientConfig(endpoints...))
	if err != nil {
		return Node{}, err
	}
	if _, err := cl.AddMember(ctx, id, n.Peer); err != nil {
		_ = syscall.Kill(n.PID, syscall.SIGTERM)
		return Node{}, fmt.Errorf("localcluster: add node %d to the membership: %w", id, err)
	}
	return *n, nil
}

// RemoveNode removes node id from the membership of the cluster in dir,
// then stops its process and drops it from cluster.json.
func RemoveNode(ctx context.Context, dir string, id uint64) error {
	info, err := Load(dir)
	if err != nil {
		return err
	}
	var endpoints []string
	var victim *Node
	kept := info.Nodes[:0]
	for i := range info.Nodes {
		n := info.Nodes[i]
		if n.ID == id {
			victim = &n
			continue
		}
		endpoints = append(endpoints, n.HTTP)
		kept = append(kept, n)
	}
	if victim == nil {
		return fmt.Errorf("%w: no node %d in %s", ErrInvalid, id, filepath.Join(dir, File))
	}
	acc, err := info.Security.Load()
	if err != nil {
		return err
	}
	cl, err := client.New(acc.ClientConfig(endpoints...))
	if err != nil {
		return err
	}
	if _, err := cl.RemoveMember(ctx, id); err != nil {
		return fmt.Errorf("localcluster: remove node %d: %w", id, err)
	}
	if ownsPID(*victim) {
		_ = syscall.Kill(victim.PID, syscall.SIGTERM)
	}
	info.Nodes = kept
	return writeInfo(dir, info)
}

// Down stops every node of the cluster in dir (SIGTERM, then SIGKILL after
// a grace period) and returns the IDs it stopped.
func Down(dir string) ([]uint64, error) {
	info, err := Load(dir)
	if err != nil {
		return nil, err
	}
	var stopped []uint64
	for _, n := range info.Nodes {
		if ownsPID(n) {
			_ = syscall.Kill(n.PID, syscall.SIGTERM)
			stopped = append(stopped, n.ID)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, n := range info.Nodes {
		for ownsPID(n) && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond) // another process's exit: nothing to wait on but polling
		}
		if ownsPID(n) {
			_ = syscall.Kill(n.PID, syscall.SIGKILL)
		}
	}
	return stopped, os.Remove(filepath.Join(dir, File))
}

// Running reports, for the cluster in dir, which nodes' processes are
// alive.
func Running(dir string) (map[uint64]bool, error) {
	info, err := Load(dir)
	if err != nil {
		return nil, err
	}
	alive := map[uint64]bool{}
	for _, n := range info.Nodes {
		alive[n.ID] = ownsPID(n)
	}
	return alive, nil
}

// StatusAll asks every endpoint for its status; a node that does not
// answer has an error in its slot.
func StatusAll(ctx context.Context, endpoints []string, acc Access) ([]api.NodeStatus, []error) {
	sts := make([]api.NodeStatus, len(endpoints))
	errs := make([]error, len(endpoints))
	done := make(chan int)
	for i, ep := range endpoints {
		go func() {
			sts[i], errs[i] = StatusOf(ctx, ep, acc)
			done <- i
		}()
	}
	for range endpoints {
		<-done
	}
	return sts, errs
}

// Clear removes a stopped cluster's files from dir (cluster.json, and each
// node's data directory and log), so that a new cluster can start there.
// It refuses, and removes nothing, if dir holds anything else: such a
// directory is not a cluster's, and its files are not ours to delete. A
// dir that does not exist is clear.
func Clear(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("localcluster: %w", err)
	}
	for _, e := range entries {
		if !clusterFile(e.Name()) {
			return fmt.Errorf("%w: %s holds %q, which no cluster wrote: choose an empty or a cluster's directory", ErrInvalid, dir, e.Name())
		}
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return fmt.Errorf("localcluster: %w", err)
		}
	}
	return nil
}

// clusterFile reports whether name is one a Cluster writes in its Dir:
// cluster.json (and its temporary), node-N, node-N.log, and the tls
// directory.
func clusterFile(name string) bool {
	if name == File || name == File+".tmp" || name == TLSDir {
		return true
	}
	id, ok := strings.CutPrefix(strings.TrimSuffix(name, ".log"), "node-")
	_, err := strconv.ParseUint(id, 10, 64)
	return ok && err == nil
}
