package server

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"
)

// 64 clients writing 1 MB values at once, over real TCP, keep their leader
// (elections after 10 to 20 s of silence).
// Before the node bounded the entries one batch takes
// (node.Config.MaxEntryBytesPerBatch), the leader took the 64 writes
// into one Ready and spent seconds writing and fsyncing 64 MB on its loop,
// with no heartbeat and no append going out meanwhile: the followers
// elected another leader, and loadgen's run of 200 such writes lost a
// quarter of them. No timing is asserted: only that the term and the
// leader do not change, and that every node ends with every value.
//
// That holds with a timing margin, explicit here: the loop neither ticks
// nor steps while it writes a batch, so the longest write of a 4 MiB batch
// must stay below the election timeout. On a loaded machine it does not
// stay below 3 s: one run at load 19-25 (-race) recorded the leader's 23
// durable writes (coord_raft_append_seconds) as 3 between 1.6 and 3.3 s
// and 2 over 13 s (fsyncs queued behind other processes' on a shared
// disk); the test failed now and then with the 3 to 6 s it had, whenever
// such a stall held the leader but not a follower. Elections here come
// after 10 to 20 s of silence (ten times the default), which leaves the
// first election up to 20 s, hence waitLeaderWithin. The node package's
// TestLargeProposalsAtOnceKeepTheLeader pins the batch bound itself, in
// simulated time, with a control that re-elects without it: this test
// is the end-to-end check over real TCP and disks, not the bound's.
func TestManyLargeWritesAtOnceKeepTheLeader(t *testing.T) {
	const (
		valueBytes = 1_000_000
		writers    = 64
		// electionMargin multiplies the default election timeout (see
		// above).
		electionMargin = 10
	)
	c := &testCluster{t: t, peers: map[uint64]string{}, https: map[uint64]net.Listener{}, nodes: map[uint64]*testNode{},
		configFor: func(_ uint64, cfg *Config) {
			defaults := DefaultConfig()
			cfg.TickInterval, cfg.ElectionTicks = defaults.TickInterval, electionMargin*defaults.ElectionTicks
			cfg.SnapshotEntries = defaults.SnapshotEntries
		}}
	c.startNodes(3)
	leader := c.waitLeaderWithin(2 * time.Minute)
	term := c.nodes[leader].Status().Term

	value := func(w int) []byte { return bytes.Repeat([]byte{byte('a' + w%26), byte('0' + w/26)}, valueBytes/2) }
	var wg sync.WaitGroup
	errs := make([]error, writers)
	for w := range writers {
		wg.Go(func() {
			cmd := Command{Op: OpPut, Key: fmt.Sprintf("big/%d", w), Value: value(w)}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			res, err := c.nodes[leader].Propose(ctx, cmd)
			if err == nil && res.Status != StatusOK {
				err = fmt.Errorf("status %v", res.Status)
			}
			errs[w] = err
		})
	}
	wg.Wait()
	for w, err := range errs {
		if err != nil {
			t.Errorf("put big/%d: %v", w, err)
		}
	}
	for id, n := range c.nodes {
		waitApplied(t, n, 5*time.Minute, "every large value applied", func(v View) bool {
			for w := range writers {
				if kv, ok := v.Get(fmt.Sprintf("big/%d", w)); !ok || !bytes.Equal(kv.Value, value(w)) {
					return false
				}
			}
			return true
		})
		if st := n.Status(); st.Term != term || st.Leader != leader {
			t.Errorf("node %d: term %d, leader %d; want term %d, leader %d unchanged (an election during the writes)",
				id, st.Term, st.Leader, term, leader)
		}
	}
}
