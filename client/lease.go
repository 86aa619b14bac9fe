package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"time"

	"coord/api"
)

// Lease is a lease record as the cluster holds it.
type Lease struct {
	Name string
	// Holder is "" when the lease is free.
	Holder string
	// Token is the fencing token of the current (or last) tenure.
	Token uint64
	// TTL is the time to live granted at the last acquire or renew.
	TTL time.Duration
	// Remaining is the time left by the leader's clock; -1 when the
	// answering node could not say (a stale read on a follower).
	Remaining time.Duration
	// Revision is the log index of the last change to the lease.
	Revision uint64
}

func leaseFrom(r api.LeaseResponse) Lease {
	l := Lease{Name: r.Name, Holder: r.Holder, Token: r.Token, TTL: time.Duration(r.TTLMs) * time.Millisecond,
		Remaining: -1, Revision: r.Revision}
	if r.RemainingMs != nil {
		l.Remaining = time.Duration(*r.RemainingMs) * time.Millisecond
	}
	return l
}

func leasePath(name, op string) string {
	p := "/v1/leases/" + pathSegment(name)
	if op != "" {
		p += "/" + op
	}
	return p
}

func (c *Client) leaseOp(ctx context.Context, name, op string, req api.LeaseRequest) (Lease, error) {
	if name == "" || req.Holder == "" {
		return Lease{}, fmt.Errorf("%w: empty lease name or holder", ErrInvalid)
	}
	body, err := json.Marshal(req)
	if err != nil {
		return Lease{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	var r api.LeaseResponse
	// A renewal applied twice does no harm, and the leader answers most
	// without a Raft write, where a session would never see its sequence
	// number: it goes without one (a session that later acknowledged that
	// number would look evicted).
	// A renewal goes to the leader even under Config.Spread: a follower
	// would forward it over HTTP (the leader answers it), adding a hop
	// to the lease's time and taking no work off the leader.
	err = c.do(ctx, call{method: "POST", path: leasePath(name, op), body: body, write: true, sessionless: op == "renew",
		spreads: op != "renew"}, &r)
	return leaseFrom(r), err
}

// Acquire makes holder the holder of name for ttl, if the lease is free.
// If not, the error matches ErrHeld and, as an *Error, names the holder.
func (c *Client) Acquire(ctx context.Context, name, holder string, ttl time.Duration) (Lease, error) {
	if ttl < time.Millisecond {
		return Lease{}, fmt.Errorf("%w: ttl %v under 1ms", ErrInvalid, ttl)
	}
	return c.leaseOp(ctx, name, "acquire", api.LeaseRequest{Holder: holder, TTLMs: ttl.Milliseconds()})
}

// Renew restarts holder's lease for ttl (0: the TTL granted before), if
// token is still current. Otherwise the error matches ErrLost.
func (c *Client) Renew(ctx context.Context, name, holder string, token uint64, ttl time.Duration) (Lease, error) {
	if token == 0 {
		return Lease{}, fmt.Errorf("%w: token 0", ErrInvalid)
	}
	return c.leaseOp(ctx, name, "renew", api.LeaseRequest{Holder: holder, Token: token, TTLMs: ttl.Milliseconds()})
}

// Release frees the lease, if token is still current. Otherwise the error
// matches ErrLost.
func (c *Client) Release(ctx context.Context, name, holder string, token uint64) error {
	if token == 0 {
		return fmt.Errorf("%w: token 0", ErrInvalid)
	}
	_, err := c.leaseOp(ctx, name, "release", api.LeaseRequest{Holder: holder, Token: token})
	return err
}

// Lease returns the lease record of name; a lease never taken is free with
// Token 0.
func (c *Client) Lease(ctx context.Context, name string, opts ...ReadOption) (Lease, error) {
	if name == "" {
		return Lease{}, fmt.Errorf("%w: empty lease name", ErrInvalid)
	}
	q := url.Values{}
	for _, o := range opts {
		o(q)
	}
	var r api.LeaseResponse
	// A follower forwards a linearizable read of a lease to the leader
	// (its remaining time is the leader's clock): only a stale one
	// spreads.
	stale := q.Get(api.ParamStale) != ""
	err := c.do(ctx, call{method: "GET", path: leasePath(name, ""), query: q, linearizable: !stale, spreads: stale}, &r)
	return leaseFrom(r), err
}

// WatchLease waits up to wait for the lease's revision to differ from
// revision, and returns the record as it then is. An empty name or a
// negative wait is ErrInvalid.
func (c *Client) WatchLease(ctx context.Context, name string, revision uint64, wait time.Duration) (Lease, error) {
	if err := watchArgs(name, wait); err != nil {
		return Lease{}, err
	}
	q := url.Values{api.ParamRevision: {strconv.FormatUint(revision, 10)}, api.ParamTimeoutMs: {strconv.FormatInt(wait.Milliseconds(), 10)}}
	var r api.LeaseResponse
	err := c.do(ctx, call{method: "GET", path: "/v1/watch/leases/" + pathSegment(name), query: q,
		timeout: wait + c.cfg.AttemptTimeout}, &r)
	return leaseFrom(r), err
}

// Status returns the status of the node at endpoint (host:port), without
// retrying elsewhere.
func (c *Client) Status(ctx context.Context, endpoint string) (api.NodeStatus, error) {
	var st api.NodeStatus
	err := c.attempt(ctx, endpoint, call{method: "GET", path: "/v1/status", query: url.Values{}}, &st)
	return st, err
}

// AddMember adds node id, whose Raft transport listens on peer, to the
// cluster: first as a learner, then as a voter once it caught up.
func (c *Client) AddMember(ctx context.Context, id uint64, peer string) ([]api.Member, error) {
	body, _ := json.Marshal(api.MemberRequest{ID: id, Peer: peer})
	var out api.MembersResponse
	err := c.do(ctx, call{method: "POST", path: "/v1/members", body: body, timeout: 30 * time.Second, linearizable: true}, &out)
	return out.Members, err
}

// RemoveMember removes node id from the cluster.
func (c *Client) RemoveMember(ctx context.Context, id uint64) ([]api.Member, error) {
	var out api.MembersResponse
	err := c.do(ctx, call{method: "DELETE", path: "/v1/members/" + strconv.FormatUint(id, 10), timeout: 30 * time.Second, linearizable: true}, &out)
	return out.Members, err
}
