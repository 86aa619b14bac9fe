package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"coord/api"
)

// Lease sessions (GET /v1/leases/{name}/session): a holder keeps a stream
// open to the leader, and the leader frees the lease SessionGrace after the
// stream closes from the holder's side, if the token is still current.
// The package doc ("Lease sessions") says why no two holders overlap.

// Defaults of APIConfig.SessionKeepAlive and APIConfig.SessionGrace.
const (
	SessionKeepAliveDefault = 250 * time.Millisecond
	SessionGraceDefault     = 2 * time.Second
)

// The bounds of Config.LeaseSessionGrace (--lease-session-grace). The
// holder steps down after half the grace without an event, so half of the
// shortest grace still spans two keep-alives; the longest keeps a dead
// holder's lease at most a minute past its death, never longer than its
// TTL would have.
const (
	LeaseSessionGraceMin = 4 * SessionKeepAliveDefault
	LeaseSessionGraceMax = time.Minute
)

// sessionReleaseTimeout bounds the proposal of one session release.
const sessionReleaseTimeout = 5 * time.Second

// tenureKey names one tenure of a lease.
type tenureKey struct {
	name  string
	token uint64
}

// tenureSessions is what the leader knows of one tenure's session streams.
type tenureSessions struct {
	streams int         // open streams
	timer   *time.Timer // the release pending after the last stream closed
	// releasing is set once the release was proposed: no stream opens for
	// the tenure again in this term, whatever the proposal's fate (it may
	// still commit after a failure).
	releasing bool
}

// sessionRegistry is the leader's table of session streams, for one term
// of leadership: a node that stops leading, or leads again in a later
// term, starts from an empty table (pending releases are dropped; a
// release proposed in the old term either committed before the new term's
// first entry, and a new session's read barrier sees it, or never commits).
//
// sessionRegistry is safe for concurrent use.
type sessionRegistry struct {
	mu      sync.Mutex
	term    uint64
	tenures map[tenureKey]*tenureSessions
}

// forTerm returns the table of term, emptying it if it was another term's.
// s.mu is held.
func (s *sessionRegistry) forTerm(term uint64) map[tenureKey]*tenureSessions {
	if s.term != term || s.tenures == nil {
		for _, t := range s.tenures {
			if t.timer != nil {
				t.timer.Stop()
			}
		}
		s.term, s.tenures = term, map[tenureKey]*tenureSessions{}
	}
	return s.tenures
}

// open registers a stream of tenure k in term, cancelling a pending
// release. It refuses a tenure whose release was proposed.
func (s *sessionRegistry) open(term uint64, k tenureKey) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	tenures := s.forTerm(term)
	t := tenures[k]
	if t == nil {
		t = &tenureSessions{}
		tenures[k] = t
	}
	if t.releasing {
		return fail(api.CodeLost, fmt.Sprintf("the session of token %d ended and the lease is being released", k.token))
	}
	if t.timer != nil {
		t.timer.Stop()
		t.timer = nil
	}
	t.streams++
	return nil
}

// close unregisters a stream of tenure k opened in term. If the holder's
// side closed it (holderGone) and it was the tenure's last stream, release
// runs after grace unless another stream opens first.
func (s *sessionRegistry) close(term uint64, k tenureKey, holderGone bool, grace time.Duration, release func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.term != term {
		return // the table was emptied: another term
	}
	t := s.tenures[k]
	if t == nil {
		return
	}
	t.streams--
	if t.streams > 0 || t.releasing {
		return
	}
	if !holderGone {
		delete(s.tenures, k)
		return
	}
	t.timer = time.AfterFunc(grace, func() {
		if s.beginRelease(term, k, t) {
			release()
		}
	})
}

// beginRelease marks t as releasing, if it is still the tenure's entry of
// term with no stream open: a stream that opened meanwhile wins.
func (s *sessionRegistry) beginRelease(term uint64, k tenureKey, t *tenureSessions) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.term != term || s.tenures[k] != t || t.streams > 0 || t.releasing {
		return false
	}
	t.releasing, t.timer = true, nil
	return true
}

// sessionMetrics counts lease sessions.
type sessionMetrics struct {
	open     prometheus.Gauge
	releases prometheus.Counter
}

func newSessionMetrics() sessionMetrics {
	return sessionMetrics{
		open: prometheus.NewGauge(prometheus.GaugeOpts{Name: "coord_lease_sessions_open",
			Help: "Lease session streams this node serves."}),
		releases: prometheus.NewCounter(prometheus.CounterOpts{Name: "coord_lease_session_releases_total",
			Help: "Releases the leader proposed because a holder's session stream closed from the holder's side (each frees the lease if its token is still current)."}),
	}
}

func (m sessionMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.open, m.releases}
}

// sessionArgs reads and checks a session request's name, token and holder.
func sessionArgs(r *request) (tenureKey, string, error) {
	k := tenureKey{name: r.PathValue("name")}
	if err := checkName("lease name", k.name); err != nil {
		return k, "", err
	}
	token, has, err := uintParam(r, api.ParamToken)
	if err != nil {
		return k, "", err
	}
	if !has || token == 0 {
		return k, "", fmt.Errorf("%w: token is required (the fencing token of the holder's tenure)", ErrInvalid)
	}
	k.token = token
	holder := r.URL.Query().Get(api.ParamHolder)
	if holder == "" {
		return k, "", fmt.Errorf("%w: holder is required", ErrInvalid)
	}
	if err := checkName("holder", holder); err != nil {
		return k, "", err
	}
	return k, holder, nil
}

// notLeading is the answer to a session asked of a node that does not
// lead. Sessions are not forwarded: the leader must see the holder's own
// connection close, not a forwarding node's (whose restart would look like
// the holder's death). The client tries the next node.
func (a *API) notLeading() error {
	st := a.replica.Status()
	msg := fmt.Sprintf("node %d is not the leader: open lease sessions on the leader", st.ID)
	for _, m := range st.Members {
		if m.ID == st.Leader && st.Leader != st.ID {
			msg = fmt.Sprintf("node %d is not the leader: open lease sessions on the leader, node %d at %s", st.ID, m.ID, m.HTTP)
		}
	}
	ae := fail(api.CodeUnavailable, msg)
	ae.body.Leader = new(st.Leader)
	return ae
}

// checkTenure answers whether holder holds name under token now.
func (a *API) checkTenure(k tenureKey, holder string) (Lease, error) {
	var l Lease
	a.replica.View(func(v View) { l = v.Lease(k.name) })
	var ae *apiError
	switch {
	case !l.Held():
		ae = fail(api.CodeLost, fmt.Sprintf("lease %q is not held (token %d is not current)", k.name, k.token))
	case l.Token != k.token:
		ae = fail(api.CodeLost, fmt.Sprintf("token %d of lease %q is not current (current %d)", k.token, k.name, l.Token))
	case l.Holder != holder:
		ae = fail(api.CodeLost, fmt.Sprintf("lease %q under token %d is held by %q, not %q", k.name, k.token, l.Holder, holder))
	default:
		return l, nil
	}
	ae.body.Holder, ae.body.Token = new(l.Holder), new(l.Token)
	return l, ae
}

// leaseSession serves GET /v1/leases/{name}/session.
func (a *API) leaseSession(w http.ResponseWriter, r *request) error {
	k, holder, err := sessionArgs(r)
	if err != nil {
		return err
	}
	if !a.leading() {
		return a.notLeading()
	}
	release, err := a.admitWatch(w)
	if err != nil {
		return err
	}
	defer release()
	// Current as of a point after the request arrived, with everything
	// committed before it applied, in a term this node leads (a release
	// proposed by an earlier leader is applied by now, or never commits).
	if err := a.replica.ReadBarrier(r.Context()); err != nil {
		if errors.Is(err, ErrNotLeader) {
			return a.notLeading()
		}
		return err
	}
	st := a.replica.Status()
	if st.Leader != st.ID {
		return a.notLeading()
	}
	term := st.Term
	if _, err := a.checkTenure(k, holder); err != nil {
		return err
	}
	if err := a.sessions.open(term, k); err != nil {
		return err
	}
	holderGone := true
	defer func() {
		a.sessions.close(term, k, holderGone && a.leadingIn(term), a.cfg.SessionGrace, func() { a.releaseSession(term, k) })
	}()
	if m := a.cfg.Metrics; m != nil {
		m.sessions.open.Inc()
		defer m.sessions.open.Dec()
	}
	end, err := a.serveSession(w, r, term, k, holder)
	if err != nil || end != "" {
		holderGone = false
	}
	return err
}

// leadingIn reports whether this node leads in term.
func (a *API) leadingIn(term uint64) bool {
	st := a.replica.Status()
	return st.Leader == st.ID && st.ID != 0 && st.Term == term
}

// serveSession streams the session's events until the holder goes away
// (end "", nil), or the leader ends it (end names why).
func (a *API) serveSession(w http.ResponseWriter, r *request, term uint64, k tenureKey, holder string) (end string, err error) {
	flusher, ok := w.(http.Flusher)
	if !ok {
		return "", fmt.Errorf("server: streaming unsupported by this connection")
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	send := func(event string, data any) bool {
		b, _ := json.Marshal(data)
		if _, err := fmt.Fprintf(w, "event: %s\ndata: %s\n\n", event, b); err != nil {
			return false
		}
		flusher.Flush()
		return true
	}
	opened := api.SessionOpened{Name: k.name, Token: k.token, KeepAliveMs: a.cfg.SessionKeepAlive.Milliseconds(),
		GraceMs: a.cfg.SessionGrace.Milliseconds()}
	if !send(api.EventSession, opened) {
		return "", nil
	}
	keepAlive := time.NewTicker(a.cfg.SessionKeepAlive)
	defer keepAlive.Stop()
	for {
		changed := a.replica.ChangedOf(Watched{Lease: true, Name: k.name})
		if _, err := a.checkTenure(k, holder); err != nil {
			send(api.EventEnd, api.SessionEnded{Reason: api.EndLost})
			return api.EndLost, nil
		}
		select {
		case <-changed:
		case <-keepAlive.C:
			if !a.leadingIn(term) {
				send(api.EventEnd, api.SessionEnded{Reason: api.EndNotLeader})
				return api.EndNotLeader, nil
			}
			if !send(api.EventKeepAlive, struct{}{}) {
				return "", nil // the holder's side is gone
			}
		case <-r.Context().Done():
			return "", nil
		}
	}
}

// releaseSession proposes the release of tenure k, whose holder's session
// closed from its side a grace period ago: an Expire naming the token and
// the last renewal, which the machine applies only if neither changed.
func (a *API) releaseSession(term uint64, k tenureKey) {
	if !a.leadingIn(term) {
		return
	}
	var l Lease
	a.replica.View(func(v View) { l = v.Lease(k.name) })
	if !l.Held() || l.Token != k.token {
		return
	}
	// Counted before it is proposed, so that whoever sees the lease freed
	// sees the count too.
	if m := a.cfg.Metrics; m != nil {
		m.sessions.releases.Inc()
	}
	ctx, cancel := context.WithTimeout(context.Background(), sessionReleaseTimeout)
	defer cancel()
	res, err := a.replica.Propose(ctx, Command{Op: OpExpire, Key: k.name, Token: k.token, Renewed: l.Renewed})
	switch {
	case err != nil:
		a.cfg.Logger.Warn("lease session: release failed; the lease will expire", "lease", k.name, "token", k.token, "err", err)
	case res.Status != StatusOK:
		a.cfg.Logger.Debug("lease session: release not applied", "lease", k.name, "token", k.token, "status", res.Status)
	default:
		a.cfg.Logger.Info("lease session: released: the holder's session closed", "lease", k.name, "token", k.token,
			"holder", l.Holder, "grace", a.cfg.SessionGrace)
	}
}
