// Package server is coord's cluster server: a replicated key-value and lease
// state machine on top of the Raft core, served over HTTP/JSON.
//
// The state machine (Machine) is pure and deterministic: committed commands
// go in with their log index, results come out, and every replica that
// applies the same log reaches the same state. It holds
//
//   - keys with revisions: the revision of a key is the log index of the
//     write that last changed it, so revisions grow across the whole store
//     and a compare-and-swap names the revision it expects
//     (prev_revision; 0 means the key must not exist); a batch (OpBatch,
//     batch.go) puts and deletes several keys, each under its own
//     condition, all at one revision or none;
//   - leases with fencing tokens: a token is the log index of the Acquire
//     that issued it, so every token is greater than every token issued
//     before it for any name;
//   - client sessions: a command carries a client id and a sequence number,
//     and the machine remembers each session's results until the client
//     acknowledges them, so a retried write is applied exactly once (the
//     Raft dissertation, §6.3);
//   - the members' Raft transport addresses (OpPeerSet, OpPeerForget), so
//     that a restarted or new node learns them from the log (peers.go).
//
// # Lease expiry
//
// Expiry is measured by the leader alone, on its own monotonic clock, as
// etcd's lessor does: the replicated state never holds a wall-clock time.
// Each node's lessor notes, when it applies an Acquire or Renew, the time of
// that apply plus the lease's TTL. Only the leader acts on its notes: when a
// deadline passes it proposes an Expire command naming the token and the
// index of the last renewal it saw, and the machine frees the lease only if
// neither changed in between. A node that becomes leader first pushes every
// deadline to its own now plus the full TTL, so that no lease expires early
// because of a leader change; a lease can only last longer than its holder
// thinks, never shorter. A holder measures its own expiry from before it
// sent the request, so its view is never later than the leader's (clock
// rate drift aside).
//
// Grants (Acquire), revocations (Release) and expiries (Expire) are Raft
// writes. Renewals are not, unless they change the TTL: the leader answers
// them itself (Node.renewOnLeader), as etcd's LeaseRenew does. Why no two
// holders can then believe they hold one lease at once:
//
//  1. The leader answers a renewal only after a ReadIndex round sent after
//     the request arrived (at time r) was acknowledged by a quorum in its
//     term, and after it applied everything committed before that round.
//     So the holder and token it checks are current as of r: a renewal
//     after a release, an expiry or a new tenure is refused.
//  2. Any later leader is elected by a quorum, which shares a voter with
//     the quorum of step 1; that voter acknowledged the round before it
//     voted for the later term (after voting it would have refused it), so
//     the later leader's election, and its promotion of its lessor, happen
//     after r. Its promotion gives every held lease a full TTL from then:
//     it expires nothing before r + TTL.
//  3. The holder believes the renewal good until s + TTL, where s, the send
//     time, is before r. The leader that answered moves its own deadline to
//     its now (after r) plus the TTL. So neither the answering leader nor
//     any later one frees the lease before the holder stops believing in
//     it.
//  4. An Expire in flight cannot undo a renewal answered this way: the
//     leader answers only while its deadline has not passed and it has not
//     proposed an Expire (otherwise the renewal goes through the log, and
//     changes the renewal index the Expire names), and an Expire proposed
//     by an earlier leader is either committed before the new leader's
//     first entry, and so applied before step 1 reads the state, or never
//     committed.
//  5. A node promotes its lessor whenever it leads in a new term, not only
//     when it was a follower just before: another leader may have answered
//     renewals in between.
//
// Renewals share ReadIndex rounds of their own, started at most every
// 10 ms (renewRoundInterval): a renewal that arrives while a round is in
// flight, or within 10 ms of the last round's start, waits for the next
// round, which starts after it arrived (step 1 holds as for a round of its
// own). Every round is a heartbeat that each follower receives and answers,
// so renewals cost the followers at most 100 heartbeats a second, however
// many arrive (at 3,333 renewals a second the rounds had followed each
// other every few milliseconds, 12-17% of each follower's CPU); a renewal
// waits at most 10 ms more than a round trip, against a TTL of seconds.
// The regular heartbeats could confirm renewals too, at no extra message,
// but a renewal would then wait up to a heartbeat interval (100 ms by
// default), which holds back a client that renews its leases one after
// another.
//
// Not leader leases by clock: a leader that answered renewals without a
// round rests on there being no other leader within an election timeout
// of its last quorum contact. coord does not keep that bound: a follower
// that sees its leader's connection close from the leader's end campaigns
// at once (the peer-close hint, docs/raft.md), so a new leader can be
// elected, and expire leases, while the old leader's clock lease still
// runs (the old leader's process may be alive, its Raft loop stalled, and
// still answering on its API).
//
// The lessor indexes deadlines by time (a heap), so a check costs the
// leases that expire, not a scan of every lease.
//
// # Lease sessions
//
// A holder may keep a session stream open to the leader for its tenure
// (GET /v1/leases/{name}/session, session.go); when the stream closes from
// the holder's side the leader waits SessionGrace (G), then proposes an
// Expire naming the token and the last renewal, which frees the lease only
// if neither changed. The holder, for its part, stops acting as the holder
// within G/2 of the last event it received unless a new stream of the
// tenure opened (lease/raftlease). Why no two holders overlap:
//
//  1. The leader proposes the release no sooner than G after it saw the
//     stream close, only if no stream of the tenure opened since, and once
//     it has proposed it, it opens no stream of that tenure again in its
//     term (the proposal may commit whatever the leader learns of it).
//  2. Every event the holder received left the leader before the close,
//     so the holder has stopped by G/2 plus one network delay after the
//     close: before the release if the delay is under G/2.
//  3. Sessions live in one leader's memory for one term (sessionRegistry).
//     A new leader frees nothing for a session's end; a release proposed
//     by an old leader either committed before the new leader's first
//     entry, and the read barrier before a new session sees it, or never
//     commits. A stream the leader ends because it stopped leading ("end:
//     not_leader") frees nothing, and the holder keeps its tenure by
//     renewals until it has a session on the new leader.
//  4. A session is served by the leader only, not forwarded: a forwarding
//     node's restart would look like the holder's death.
//
// # Stopping a leader
//
// On SIGTERM a leader hands leadership over (Node.HandOver, Serve) and
// exits. The steps, each on the critical path of the writes that wait:
// the leader asks its core to transfer to its most up-to-date follower
// (TimeoutNow goes at once if that follower has the whole log); the
// target campaigns, sending its vote requests while it writes its own vote
// (node.Handler; docs/raft.md says why that is safe); the voters write
// theirs and answer; the new leader appends its first entry. The stopping
// leader counts the hand-over done when that entry's append arrives (only
// the leader of a term sends appends), without waiting to write it. It
// answers the writes it held meanwhile with 503 naming the new leader
// sooner, as soon as the target's vote request arrives (the target
// campaigns); they were never proposed here, so a client's retry there
// cannot apply twice (and a retry in an exactly-once session never does).
// So is a write that came before and was refused once the transfer began
// (the core refuses proposals during it).
// A write that reaches the target while it campaigns is held by its node
// and appended with its first entry, in the same disk write
// (Node.ProposeAtElection), even while its status, published after its
// vote is written, still names the old leader (a TimeoutNow came: the loop
// decides); if it does not win, the write goes on as on a follower. A
// renewal waits for the election's outcome instead (Node.AwaitElection),
// and the new leader checks the API token it carries against the tokens
// as of its answer (a revocation may have committed meanwhile). The API then
// stops: requests in flight are answered, connections that never sent a
// request are closed at once, and after 250 ms what is still open (watch
// and session streams) is ended, so the process exits in milliseconds, not
// after the 2 s bound; a stream's client reconnects to another node.
//
// # Security
//
// With Config.Security (coord server's default), the transport is mutual
// TLS 1.3 bound to node ids, the API is HTTPS, and every request but
// GET /v1/status carries a bearer token. Tokens live in the replicated
// state as SHA-256 hashes with a role (read, write, admin) and key and
// lease-name prefixes (tokens.go); the API checks them against a
// route-role table (auth.go), so every node decides alike. The leader of a
// new cluster makes the initial admin token once, only if the cluster
// never had one. docs/security.md has the threat model.
//
// # Seeing it
//
// Every node serves a page at /ui/ (ui.go, three embedded files) that
// reads GET /v1/dashboard (dashboard.go): the members' statuses as each
// answers, the held leases, the elections this node saw and why they began
// (observe.go), the write rate. /healthz and /readyz are probes in the
// style of Kubernetes (health.go); per-peer and lease metrics are in
// metrics_cluster.go. docs/ui.md describes them.
//
// # Not guaranteed
//
// Sessions are evicted least-recently-used beyond Limits.Sessions; a client
// whose session was evicted and that retries a write it already sent can
// see it applied twice. A lease protects a resource only through its
// fencing token: a holder paused past its expiry still believes it holds
// the lease until it checks its own clock.
package server
