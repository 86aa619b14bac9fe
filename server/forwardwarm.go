package server

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"time"

	"coord/api"
)

// forwardWarmEvery is how often a follower refreshes its connection to an
// unchanged leader: below the forwarding client's idle timeout (30 s, see
// apiSecurity), so that a follower that forwards nothing for a while
// still has the connection when a request comes.
const forwardWarmEvery = 20 * time.Second

// warmForwarding keeps the forwarding client's connection to the leader's
// API made: whenever the leader changes to another node, and every
// forwardWarmEvery while it stays, it sends GET /healthz to the leader
// over client (scheme "https" on a secure node), so that the first
// request this node forwards to a new leader does not wait for a TCP and
// TLS handshake. It returns when the node stops. It wakes only when the
// role, the leader or the term changes, never at each commit.
func (n *Node) warmForwarding(client *http.Client, scheme string) {
	if scheme == "" {
		scheme = "http"
	}
	ticker := time.NewTicker(forwardWarmEvery)
	defer ticker.Stop()
	var warmed uint64 // the leader last warmed
	refresh := false
	for {
		changed := n.shell.RoleChanged()
		if lead := n.shell.Status().Lead; lead != 0 && lead != n.cfg.ID && (lead != warmed || refresh) {
			if n.warmLeader(client, scheme, lead) {
				warmed = lead
			}
		}
		select {
		case <-n.shell.Done():
			return
		case <-changed:
			refresh = false
		case <-ticker.C:
			refresh = true
		}
	}
}

// warmLeader sends GET /healthz to node lead's API, and reports whether
// it answered.
func (n *Node) warmLeader(client *http.Client, scheme string, lead uint64) bool {
	var addr string
	for _, m := range n.Status().Members {
		if m.ID == lead {
			addr = m.HTTP
		}
	}
	if addr == "" {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, scheme+"://"+addr+"/healthz", nil)
	if err != nil {
		return false
	}
	req.Header.Set(api.HeaderForwarded, strconv.FormatUint(n.cfg.ID, 10))
	resp, err := client.Do(req)
	if err != nil {
		n.log.Debug("warm the connection to the leader", "leader", lead, "addr", addr, "err", err)
		return false
	}
	// Read to the end, so that the connection goes back to the pool.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
	resp.Body.Close()
	n.log.Debug("warmed the connection to the leader", "leader", lead, "addr", addr)
	return true
}
