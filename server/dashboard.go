package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"coord/api"
	"coord/raft"
)

// The dashboard: GET /v1/dashboard is the cluster as the answering node
// sees it, in one JSON document (api.Dashboard); with stream=true, a stream of
// server-sent events, one such document per event, at least every
// dashboardInterval and soon after every change. The page at /ui/ (ui.go)
// draws it. It needs a read token, as the leases it shows do.

// Timings of the dashboard.
const (
	// dashboardInterval is the longest gap between two events of a
	// stream: the page counts leases down and notices a node it lost
	// within it.
	dashboardInterval = 500 * time.Millisecond
	// dashboardThrottle is the shortest gap: a burst of changes (an
	// election, a load of writes) sends one event, not hundreds.
	dashboardThrottle = 100 * time.Millisecond
	// peerStatusTimeout bounds asking one peer for its status, and
	// peerStatusFresh is how long an answer is used before asking again
	// (several open pages share the answers).
	peerStatusTimeout = 500 * time.Millisecond
	peerStatusFresh   = 250 * time.Millisecond
	// dashboardLeasesMax bounds the leases one document lists (by name);
	// LeasesHeld still counts them all.
	dashboardLeasesMax = 200
)

// observation is what a Node knows beyond its Status, for the dashboard
// and /readyz.
type observation struct {
	status    api.NodeStatus
	lastIndex uint64
	// progress is the leader's view of each follower; nil elsewhere.
	progress map[uint64]raft.Progress
	// contacts is when each peer was last heard from.
	contacts map[uint64]time.Time
	// leaderCommit is the highest commit index the current leader sent.
	leaderCommit uint64
	// contactMax is how long a follower may go without a word from its
	// leader before it starts an election (the longest election timeout).
	contactMax time.Duration
	elections  []api.Election
	writes     []uint64
	leases     []api.DashboardLease
	leasesHeld int
}

// observable is a Replica that can say more than its Status (Node).
type observable interface {
	observation(withLeases bool) observation
	// StatusChanged is closed at the next change of the Raft status.
	StatusChanged() <-chan struct{}
}

var _ observable = (*Node)(nil)

func (n *Node) observation(withLeases bool) observation {
	st := n.shell.Status()
	now := time.Now()
	o := observation{
		status:       n.status(st),
		lastIndex:    st.LastIndex,
		contacts:     map[uint64]time.Time{},
		leaderCommit: n.obs.leaderCommitSeen(st.Term),
		contactMax:   2 * time.Duration(n.cfg.ElectionTicks) * n.cfg.TickInterval,
		elections:    n.obs.recentElections(),
		writes:       n.obs.writesPerSecond(),
	}
	if st.Role == raft.Leader {
		o.progress = st.Progress
	}
	for _, m := range o.status.Members {
		if last, ok := n.obs.lastContact(m.ID); ok {
			o.contacts[m.ID] = last
		}
	}
	if withLeases {
		o.leases, o.leasesHeld = n.sm.dashboardLeases(now)
	}
	return o
}

// heldNamesCache is the first dashboardLeasesMax names of held leases, as
// of a count of stateMachine.heldChanges.
type heldNamesCache struct {
	mu      sync.Mutex
	valid   bool
	changes uint64
	names   []string
	total   int
}

// dashboardLeases returns the first dashboardLeasesMax held leases by
// name, and how many are held. It runs under the state machine's read
// lock, which holds up applying, once per open page every 500 ms. So it
// walks the names of the held leases (the lessor has a deadline for each,
// on every node) only when which leases are held changed since it last
// did, keeps the smallest in a sorted window, and reads the records of
// those alone (BenchmarkDashboardLeases).
func (s *stateMachine) dashboardLeases(now time.Time) ([]api.DashboardLease, int) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	names, total := s.heldNamesLocked()
	out := make([]api.DashboardLease, 0, len(names))
	for _, name := range names {
		l := s.machine.Lease(name)
		dl := api.DashboardLease{Name: l.Name, Holder: l.Holder, Token: l.Token, TTLMs: l.TTL.Milliseconds(), Revision: l.Revision}
		// Only the leader knows a deadline: it answers renewals without a
		// Raft write, so a follower's lessor never hears of them.
		if left, ok := s.lessor.remaining(l.Name, now); ok && s.leading {
			ms := left.Milliseconds()
			dl.RemainingMs = &ms
		}
		out = append(out, dl)
	}
	return out, total
}

// heldNamesLocked returns the cached names, walking them anew if they
// changed; s.mu is held (read), which keeps heldChanges still.
func (s *stateMachine) heldNamesLocked() ([]string, int) {
	c := &s.heldNames
	c.mu.Lock()
	defer c.mu.Unlock()
	changes := s.heldChanges.Load()
	if c.valid && c.changes == changes {
		return c.names, c.total
	}
	names := make([]string, 0, dashboardLeasesMax)
	for name := range s.lessor.deadlines {
		switch {
		case len(names) < dashboardLeasesMax:
			i, _ := slices.BinarySearch(names, name)
			names = slices.Insert(names, i, name)
		case name < names[len(names)-1]:
			i, _ := slices.BinarySearch(names, name)
			copy(names[i+1:], names[i:len(names)-1])
			names[i] = name
		}
	}
	c.valid, c.changes, c.names, c.total = true, changes, names, len(s.lessor.deadlines)
	return names, c.total
}

// observe returns the replica's observation, or what its Status alone
// says.
func (a *API) observe(withLeases bool) observation {
	if obs, ok := a.replica.(observable); ok {
		return obs.observation(withLeases)
	}
	return observation{status: a.replica.Status()}
}

func (a *API) scheme() string {
	if a.cfg.ForwardScheme != "" {
		return a.cfg.ForwardScheme
	}
	return "http"
}

// buildDashboard asks every other member for its status and puts the
// answers beside this node's observation.
func (a *API) buildDashboard(ctx context.Context) api.Dashboard {
	obs := a.observe(true)
	st := obs.status
	now := time.Now()
	d := api.Dashboard{Node: st.ID, Scheme: a.scheme(), ClusterID: st.ClusterID, TimeUnixMs: now.UnixMilli(), Leader: st.Leader, Term: st.Term,
		Elections: obs.elections, Leases: obs.leases, LeasesHeld: obs.leasesHeld, WritesPerSecond: obs.writes}
	if d.Elections == nil {
		d.Elections = []api.Election{}
	}
	if d.Leases == nil {
		d.Leases = []api.DashboardLease{}
	}
	if d.WritesPerSecond == nil {
		d.WritesPerSecond = []uint64{}
	}
	answers := a.peers.statuses(ctx, a, st)
	for _, m := range st.Members {
		if m.ID == st.ID {
			d.HTTP = m.HTTP
		}
		dn := api.DashboardNode{ID: m.ID, Peer: m.Peer, HTTP: m.HTTP, Voter: m.Voter}
		ans := answers[m.ID]
		if dn.HTTP == "" {
			dn.HTTP = ans.http // learned from another member
		}
		if ans.err != nil {
			dn.Error = ans.err.Error()
		} else {
			dn.Reachable = true
			dn.Role, dn.Term, dn.Leader, dn.Commit, dn.Applied = ans.st.Role, ans.st.Term, ans.st.Leader, ans.st.Commit, ans.st.Applied
		}
		if last, ok := obs.contacts[m.ID]; ok && m.ID != st.ID {
			ms := max(now.Sub(last), 0).Milliseconds()
			dn.LastContactMs = &ms
		}
		dn.LagEntries = lag(obs, answers, m.ID)
		d.Nodes = append(d.Nodes, dn)
	}
	return d
}

// lag is how far behind member id is (see DashboardNode.LagEntries), or
// nil if it cannot be told.
func lag(obs observation, answers map[uint64]peerAnswer, id uint64) *uint64 {
	st := obs.status
	if obs.progress != nil {
		if id == st.ID {
			zero := uint64(0)
			return &zero
		}
		pr, ok := obs.progress[id]
		if !ok {
			return nil
		}
		v := obs.lastIndex - min(pr.Match, obs.lastIndex)
		return &v
	}
	leader, node := answers[st.Leader], answers[id]
	if st.Leader == 0 || leader.err != nil || node.err != nil {
		return nil
	}
	v := leader.st.Commit - min(node.st.Applied, leader.st.Commit)
	return &v
}

// peerAnswer is a member's answer to GET /v1/status, and the API address
// it was asked at.
type peerAnswer struct {
	http string
	st   api.NodeStatus
	err  error
}

// peerPoller asks the members for their status (the public GET
// /v1/status, so it needs no token), and keeps the answers for
// peerStatusFresh so that several pages share them.
//
// peerPoller is safe for concurrent use.
type peerPoller struct {
	mu      sync.Mutex
	at      time.Time
	answers map[uint64]peerAnswer
}

// statuses returns every member's answer; this node answers for itself
// with self.
func (p *peerPoller) statuses(ctx context.Context, a *API, self api.NodeStatus) map[uint64]peerAnswer {
	p.mu.Lock()
	defer p.mu.Unlock()
	if time.Since(p.at) >= peerStatusFresh || !sameMembers(p.answers, self.Members) {
		p.answers = a.pollPeers(ctx, self)
		p.at = time.Now()
	}
	out := make(map[uint64]peerAnswer, len(p.answers))
	for id, ans := range p.answers {
		out[id] = ans
	}
	out[self.ID] = peerAnswer{http: a.selfHTTP(self), st: self}
	return out
}

func sameMembers(answers map[uint64]peerAnswer, members []api.Member) bool {
	if len(answers) != len(members) {
		return false
	}
	for _, m := range members {
		if _, ok := answers[m.ID]; !ok {
			return false
		}
	}
	return true
}

// pollPeers asks every other member for its status. A follower may not
// know another follower's API address (nodes learn it when a peer connects,
// and followers do not talk to each other): it asks those that answered,
// the leader among them, and asks at the address they know.
func (a *API) pollPeers(ctx context.Context, self api.NodeStatus) map[uint64]peerAnswer {
	answers := map[uint64]peerAnswer{self.ID: {http: a.selfHTTP(self), st: self}}
	ask := func(members []api.Member) {
		var mu sync.Mutex
		var wg sync.WaitGroup
		for _, m := range members {
			wg.Add(1)
			go func() {
				defer wg.Done()
				st, err := a.peerStatus(ctx, m)
				mu.Lock()
				answers[m.ID] = peerAnswer{http: m.HTTP, st: st, err: err}
				mu.Unlock()
			}()
		}
		wg.Wait()
	}
	var known, unknown []api.Member
	for _, m := range self.Members {
		switch {
		case m.ID == self.ID:
		case m.HTTP != "":
			known = append(known, m)
		default:
			unknown = append(unknown, m)
		}
	}
	ask(known)
	for i, m := range unknown {
		for _, ans := range answers {
			for _, other := range ans.st.Members {
				if other.ID == m.ID && other.HTTP != "" && unknown[i].HTTP == "" {
					unknown[i].HTTP = other.HTTP
				}
			}
		}
	}
	ask(unknown)
	return answers
}

func (a *API) selfHTTP(self api.NodeStatus) string {
	for _, m := range self.Members {
		if m.ID == self.ID {
			return m.HTTP
		}
	}
	return ""
}

func (a *API) peerStatus(ctx context.Context, m api.Member) (api.NodeStatus, error) {
	var st api.NodeStatus
	if m.HTTP == "" {
		return st, fmt.Errorf("its API address is not known yet (it has not connected)")
	}
	ctx, cancel := context.WithTimeout(ctx, peerStatusTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.scheme()+"://"+m.HTTP+"/v1/status", nil)
	if err != nil {
		return st, err
	}
	resp, err := a.cfg.Client.Do(req)
	if err != nil {
		return st, fmt.Errorf("unreachable: %s", shortNetError(err))
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("status %s", resp.Status)
	}
	if err := json.NewDecoder(http.MaxBytesReader(nil, resp.Body, 1<<20)).Decode(&st); err != nil {
		return st, fmt.Errorf("bad status: %v", err)
	}
	if st.ID != m.ID {
		return st, fmt.Errorf("answered as node %d", st.ID)
	}
	return st, nil
}

// shortNetError names what failed without the whole URL.
func shortNetError(err error) string {
	var op *net.OpError
	switch {
	case errors.As(err, &op) && op.Err != nil:
		return op.Op + ": " + op.Err.Error()
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Sprintf("no answer within %v", peerStatusTimeout)
	}
	return err.Error()
}

// dashboard serves GET /v1/dashboard.
func (a *API) dashboard(w http.ResponseWriter, r *request) error {
	a.allowOrigin(w, r.Request)
	stream, err := boolParam(r, "stream")
	if err != nil {
		return err
	}
	if !stream {
		return writeJSON(w, http.StatusOK, a.buildDashboard(r.Context()))
	}
	release, err := a.admitWatch(w)
	if err != nil {
		return err
	}
	defer release()
	flusher, ok := w.(http.Flusher)
	if !ok {
		return fmt.Errorf("server: streaming unsupported by this connection")
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	flusher.Flush()
	ticker := time.NewTicker(dashboardInterval)
	defer ticker.Stop()
	var statusChanged <-chan struct{}
	for {
		if obs, ok := a.replica.(observable); ok {
			statusChanged = obs.StatusChanged()
		}
		changed := a.replica.Changed()
		data, err := json.Marshal(a.buildDashboard(r.Context()))
		if err != nil {
			return nil
		}
		if _, err := fmt.Fprintf(w, "event: %s\ndata: %s\n\n", api.EventDashboard, data); err != nil {
			return nil // the page went away
		}
		flusher.Flush()
		select {
		case <-ticker.C:
		case <-changed:
		case <-statusChanged:
		case <-r.Context().Done():
			return nil
		}
		select {
		case <-time.After(dashboardThrottle):
		case <-r.Context().Done():
			return nil
		}
	}
}

// dashboardPreflight answers a browser's CORS preflight of GET
// /v1/dashboard from a page another member served: the page fails over to
// this node when its own is gone. A preflight carries no credentials.
func (a *API) dashboardPreflight(w http.ResponseWriter, r *http.Request) {
	a.allowOrigin(w, r)
	w.WriteHeader(http.StatusNoContent)
}

// allowOrigin lets a page served by a member of the cluster read the
// dashboard of this node (CORS). Only members' origins are allowed: the
// token travels in a header the page sets, never in a cookie, so another
// site could not use a visitor's token even if it were allowed, but there
// is no reason to allow it.
func (a *API) allowOrigin(w http.ResponseWriter, r *http.Request) {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return
	}
	w.Header().Add("Vary", "Origin")
	if !a.memberOrigin(r.Context(), origin, false) && !a.memberOrigin(r.Context(), origin, true) {
		return
	}
	h := w.Header()
	h.Set("Access-Control-Allow-Origin", origin)
	h.Set("Access-Control-Allow-Methods", "GET")
	h.Set("Access-Control-Allow-Headers", "Authorization")
	h.Set("Access-Control-Max-Age", "600")
}

// memberAPIs returns the API addresses of the members this node knows:
// its own view, and (with ask) what the members it polled know, which
// includes followers this follower never heard from.
func (a *API) memberAPIs(ctx context.Context, ask bool) []string {
	st := a.replica.Status()
	var out []string
	add := func(addr string) {
		if addr != "" && !slices.Contains(out, addr) {
			out = append(out, addr)
		}
	}
	for _, m := range st.Members {
		add(m.HTTP)
	}
	if !ask {
		return out
	}
	for _, ans := range a.peers.statuses(ctx, a, st) {
		add(ans.http)
		for _, m := range ans.st.Members {
			add(m.HTTP)
		}
	}
	return out
}

// memberOrigins are the origins of the members' APIs.
func (a *API) memberOrigins(ctx context.Context) []string {
	var out []string
	for _, addr := range a.memberAPIs(ctx, true) {
		out = append(out, a.scheme()+"://"+addr)
	}
	return out
}

// memberOrigin reports whether origin is a member's API. A page loaded as
// https://localhost:PORT matches a member at 127.0.0.1:PORT (or the other
// way round): the same API.
func (a *API) memberOrigin(ctx context.Context, origin string, ask bool) bool {
	scheme, hostport, ok := strings.Cut(origin, "://")
	if !ok || scheme != a.scheme() {
		return false
	}
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		return false
	}
	for _, addr := range a.memberAPIs(ctx, ask) {
		mh, mp, err := net.SplitHostPort(addr)
		if err != nil || mp != port {
			continue
		}
		if mh == host || (isLoopback(mh) && isLoopback(host)) {
			return true
		}
	}
	return false
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}
