package server

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"coord/api"
)

// forwardWarmEvery is how often a node refreshes its connections to the
// other members' APIs: below the forwarding client's idle timeout (30 s,
// see apiSecurity), so that a node that forwards nothing for a while
// still has them when a request comes.
const forwardWarmEvery = 20 * time.Second

// warmForwarding keeps the forwarding client's connections to the other
// members' APIs made, so that the first request this node forwards to a
// new leader does not wait for a TCP and TLS handshake (10 to 20 ms on a
// loaded machine, which a failover would otherwise add). It sends GET
// /healthz over client (scheme "https" on a secure node) to every other
// member at once and every forwardWarmEvery; to a member whose Raft
// connection comes back (it restarted, and the pooled connection to its
// API died with it), seen within a tick; and to the leader whenever the
// leader changes to another node. Whoever wins the next election, the
// connection to it is already there. It returns when the node stops.
func (n *Node) warmForwarding(client *http.Client, scheme string) {
	if scheme == "" {
		scheme = "http"
	}
	refresh := time.NewTicker(forwardWarmEvery)
	defer refresh.Stop()
	tick := time.NewTicker(n.cfg.TickInterval)
	defer tick.Stop()
	var warmed uint64 // the leader last warmed
	connected := map[uint64]bool{}
	var mu sync.Mutex
	inFlight := map[uint64]bool{}
	// warm warms peer id's connection in the background, unless a warm-up
	// of it is in flight: two at once would make two connections.
	warm := func(id uint64) {
		mu.Lock()
		defer mu.Unlock()
		if inFlight[id] {
			return
		}
		inFlight[id] = true
		go func() {
			n.warmPeer(client, scheme, id)
			mu.Lock()
			delete(inFlight, id)
			mu.Unlock()
		}()
	}
	all := true
	for {
		changed := n.shell.RoleChanged()
		for _, m := range n.Status().Members {
			if m.ID == n.cfg.ID {
				continue
			}
			up := n.connected(m.ID)
			if all || (up && !connected[m.ID]) {
				warm(m.ID)
			}
			connected[m.ID] = up
		}
		if lead := n.shell.Status().Lead; lead != 0 && lead != n.cfg.ID && lead != warmed {
			warm(lead)
			warmed = lead
		}
		all = false
		select {
		case <-n.shell.Done():
			return
		case <-changed:
		case <-tick.C:
		case <-refresh.C:
			all = true
		}
	}
}

// warmPeer sends GET /healthz to node id's API.
func (n *Node) warmPeer(client *http.Client, scheme string, id uint64) {
	var addr string
	for _, m := range n.Status().Members {
		if m.ID == id {
			addr = m.HTTP
		}
	}
	if addr == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, scheme+"://"+addr+"/healthz", nil)
	if err != nil {
		return
	}
	req.Header.Set(api.HeaderForwarded, strconv.FormatUint(n.cfg.ID, 10))
	resp, err := client.Do(req)
	if err != nil {
		n.log.Debug("warm the connection to a member's API", "member", id, "addr", addr, "err", err)
		return
	}
	// Read to the end, so that the connection goes back to the pool.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
	resp.Body.Close()
	n.log.Debug("warmed the connection to a member's API", "member", id, "addr", addr)
}
