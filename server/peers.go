package server

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"sync"
	"time"

	"coord/internal/wire"
	"coord/raft"
)

// Peer addresses are replicated state. Where each member's Raft transport
// listens is set by OpPeerSet and dropped by OpPeerForget, commands the
// machine applies like any other, so a node restarted from its snapshot
// and log, and a new member that receives them from the leader, learn the
// addresses from the log alone. AddMember proposes the address before the
// membership change, so every replica knows where a member is before the
// core may send to it; RemoveMember forgets it after. The leader proposes
// the address of any member the replicated state lacks from what it knows
// itself: its own, its Config.Peers (the initial members of a new cluster,
// whose bootstrap entries carry no address), or one announced in the
// Context of a membership change that a coord from before these commands
// wrote into the log.
//
// This node's transport dials Config.Peers[id] when it names id, the
// replicated address otherwise: routing is this node's own business (a
// fault proxy in tests, a NAT), and an operator's --peers wins.

// maxPeerAddressBytes bounds a peer address: a host name (at most 253
// bytes), a colon and a port, with room for an IPv6 zone.
const maxPeerAddressBytes = 300

// maxPeers bounds the addresses the machine keeps. Members are added by
// admins one at a time, so this is far beyond any real cluster; it only
// keeps a runaway script from growing the state without end.
const maxPeers = 1024

// peerVersion is the first byte of Command.Value of OpPeerSet and
// OpPeerForget.
const peerVersion = 1

// peerAddress is what OpPeerSet and OpPeerForget carry: a member's ID and
// (OpPeerSet only) its transport address.
type peerAddress struct {
	ID   uint64
	Addr string
}

func (p peerAddress) marshal() []byte {
	e := wire.Encoder{Buf: make([]byte, 0, 12+len(p.Addr))}
	e.Byte(peerVersion)
	e.Uvarint(p.ID)
	e.String(p.Addr)
	return e.Buf
}

func unmarshalPeerAddress(b []byte) (peerAddress, error) {
	d := wire.NewDecoder(b, ErrMalformed)
	var p peerAddress
	if v := d.Byte("peer version"); d.Err() == nil && v != peerVersion {
		return p, fmt.Errorf("%w: peer version %d", ErrMalformed, v)
	}
	p.ID = d.Uvarint("peer id")
	p.Addr = d.String("peer address", maxPeerAddressBytes)
	if err := d.Done(); err != nil {
		return p, fmt.Errorf("peer: %w", err)
	}
	return p, nil
}

// PeerSetCommand returns the command that records addr as the Raft
// transport address of member id.
func PeerSetCommand(id uint64, addr string) Command {
	return Command{Op: OpPeerSet, Value: peerAddress{ID: id, Addr: addr}.marshal()}
}

// PeerForgetCommand returns the command that drops the address of member
// id.
func PeerForgetCommand(id uint64) Command {
	return Command{Op: OpPeerForget, Value: peerAddress{ID: id}.marshal()}
}

// CheckPeerAddress returns why addr cannot be a member's Raft transport
// address (wrapping ErrInvalid), or nil: it must be HOST:PORT with a host
// and a port other nodes can dial.
func CheckPeerAddress(addr string) error {
	if len(addr) > maxPeerAddressBytes {
		return fmt.Errorf("%w: peer address of %d bytes over the limit of %d", ErrInvalid, len(addr), maxPeerAddressBytes)
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%w: peer address %q: want HOST:PORT: %v", ErrInvalid, addr, err)
	}
	if host == "" {
		return fmt.Errorf("%w: peer address %q names no host: other nodes cannot dial it", ErrInvalid, addr)
	}
	if p, err := strconv.ParseUint(port, 10, 16); err != nil || p == 0 {
		return fmt.Errorf("%w: peer address %q: port %q is not a number in 1-65535", ErrInvalid, addr, port)
	}
	return nil
}

// executePeer applies OpPeerSet or OpPeerForget. Both are idempotent, so
// a retry without a session is safe.
func (m *Machine) executePeer(index uint64, c Command) Result {
	p, err := unmarshalPeerAddress(c.Value)
	if err != nil {
		return Result{Status: StatusInvalid, Reason: err.Error()}
	}
	if p.ID == 0 {
		return Result{Status: StatusInvalid, Reason: "peer id 0"}
	}
	if c.Op == OpPeerForget {
		delete(m.peers, p.ID)
		return Result{Revision: index}
	}
	if err := CheckPeerAddress(p.Addr); err != nil {
		return Result{Status: StatusInvalid, Reason: err.Error()}
	}
	if _, known := m.peers[p.ID]; !known && len(m.peers) >= maxPeers {
		return Result{Status: StatusInvalid, Reason: fmt.Sprintf("more than %d peer addresses", maxPeers)}
	}
	m.peers[p.ID] = p.Addr
	return Result{Revision: index}
}

// peerBook is the part of the transport that peers are added to and
// removed from (tcp.Transport).
type peerBook interface {
	AddPeer(id uint64, addr string)
	RemovePeer(id uint64)
}

// peerRoutes keeps the transport's address book in step with the
// replicated addresses. Its methods run on the node's loop goroutine (the
// state machine's Apply and Restore, the ConfChanged hook).
type peerRoutes struct {
	self  uint64
	local map[uint64]string // Config.Peers: they win
	book  peerBook
}

func (r *peerRoutes) set(id uint64, addr string) {
	if r == nil || id == r.self {
		return
	}
	if a := r.local[id]; a != "" {
		addr = a
	}
	r.book.AddPeer(id, addr)
}

func (r *peerRoutes) forget(id uint64) {
	if r == nil || id == r.self {
		return
	}
	r.book.RemovePeer(id)
}

// applied follows a peer command that the machine applied.
func (r *peerRoutes) applied(cmd Command, res Result) {
	if res.Status != StatusOK {
		return
	}
	p, err := unmarshalPeerAddress(cmd.Value)
	if err != nil {
		return // the machine refused it too
	}
	if cmd.Op == OpPeerForget {
		r.forget(p.ID)
	} else {
		r.set(p.ID, p.Addr)
	}
}

// restored follows a snapshot restore: the peers of the new state are
// dialed at their addresses, those only the old state had are dropped.
func (r *peerRoutes) restored(before, after map[uint64]string) {
	for _, id := range sortedKeys(after) {
		r.set(id, after[id])
	}
	for _, id := range sortedKeys(before) {
		if _, kept := after[id]; !kept {
			r.forget(id)
		}
	}
}

// confChanged runs on the shell's loop after a membership change applies.
// A removed member is cut off from the transport at once (its address
// leaves the replicated state with the OpPeerForget that follows). A
// change whose Context holds an address was written by a coord from
// before OpPeerSet: the transport dials it, and the leader proposes it as
// an OpPeerSet (proposeMissingPeers) so that the replicated state has it.
func (n *Node) confChanged(cc raft.ConfChange, _ raft.ConfState) {
	for _, c := range cc.Changes {
		switch {
		case c.Type == raft.ConfChangeRemove:
			n.routes.forget(c.NodeID)
		case len(cc.Context) > 0 && CheckPeerAddress(string(cc.Context)) == nil:
			addr := string(cc.Context)
			n.announcedMu.Lock()
			n.announced[c.NodeID] = addr
			n.announcedMu.Unlock()
			n.routes.set(c.NodeID, addr)
		}
	}
}

// knownAddress returns the address this node would propose for member
// id: its own listening address, one announced by an old membership
// change, or its configuration's.
func (n *Node) knownAddress(id uint64) string {
	if id == n.cfg.ID {
		if a := n.cfg.Peers[id]; a != "" {
			return a
		}
		return n.tr.Addr().String()
	}
	n.announcedMu.Lock()
	defer n.announcedMu.Unlock()
	if a := n.announced[id]; a != "" {
		return a
	}
	return n.cfg.Peers[id]
}

// proposeMissingPeers, while this node leads, proposes the address of
// every member that the replicated state has none for and that this node
// knows one for: the initial members of a new cluster, and members added
// by a coord from before OpPeerSet. One round runs at a time, in the
// background; wg tracks it so that Close waits for it.
func (n *Node) proposeMissingPeers(conf raft.ConfState, wg *sync.WaitGroup) {
	n.sm.mu.RLock()
	recorded := n.sm.machine.Peers()
	n.sm.mu.RUnlock()
	var missing []peerAddress
	for _, id := range slices.Concat(conf.Voters, conf.Learners) {
		if _, ok := recorded[id]; ok {
			continue
		}
		if addr := n.knownAddress(id); CheckPeerAddress(addr) == nil {
			missing = append(missing, peerAddress{id, addr})
		}
	}
	if len(missing) == 0 || !n.recordingPeers.CompareAndSwap(false, true) {
		return
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer n.recordingPeers.Store(false)
		for _, p := range missing {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, err := n.shell.Propose(ctx, PeerSetCommand(p.ID, p.Addr).Marshal())
			cancel()
			if err != nil {
				n.log.Debug("propose a peer address", "peer", p.ID, "addr", p.Addr, "err", err)
				return
			}
			n.log.Info("peer address recorded", "peer", p.ID, "addr", p.Addr)
		}
	}()
}

// AddMember implements Replica. The member's address is recorded first
// (OpPeerSet), so that every replica knows where it is before the core may
// send to it; the node then joins as a learner, and is promoted to voter
// once it has caught up (dissertation §4.2.1). Adding a learner again
// (after a failed promotion, say) is allowed, and may correct its address;
// adding a voter is refused.
func (n *Node) AddMember(ctx context.Context, id uint64, peer string) error {
	if id == 0 || peer == "" {
		return fmt.Errorf("%w: member id and address are required", ErrInvalid)
	}
	if err := CheckPeerAddress(peer); err != nil {
		return err
	}
	if n.shell.Status().Conf.IsVoter(id) {
		return fmt.Errorf("%w: node %d is a voter already", ErrInvalid, id)
	}
	if err := n.proposePeer(ctx, PeerSetCommand(id, peer)); err != nil {
		return err
	}
	learner := raft.ConfChange{Changes: []raft.ConfChangeSingle{{Type: raft.ConfChangeAddLearner, NodeID: id}}}
	if err := n.changeMembership(ctx, learner); err != nil {
		return err
	}
	voter := raft.ConfChange{Changes: []raft.ConfChangeSingle{{Type: raft.ConfChangeAddVoter, NodeID: id}}}
	return n.changeMembership(ctx, voter)
}

// RemoveMember implements Replica. The member leaves the membership, then
// its address the replicated state (OpPeerForget); if only the second step
// fails, the address stays behind, which is harmless, and removing the
// node again (a no-op for the membership) forgets it.
func (n *Node) RemoveMember(ctx context.Context, id uint64) error {
	cc := raft.ConfChange{Changes: []raft.ConfChangeSingle{{Type: raft.ConfChangeRemove, NodeID: id}}}
	if err := n.changeMembership(ctx, cc); err != nil {
		return err
	}
	if err := n.proposePeer(ctx, PeerForgetCommand(id)); err != nil {
		return fmt.Errorf("server: node %d was removed, but its address was not forgotten (remove it again to retry): %w", id, err)
	}
	return nil
}

// proposePeer proposes a peer command and turns a refusal into ErrInvalid.
func (n *Node) proposePeer(ctx context.Context, cmd Command) error {
	res, err := n.Propose(ctx, cmd)
	if err != nil {
		return err
	}
	if res.Status != StatusOK {
		return fmt.Errorf("%w: %s", ErrInvalid, res.Reason)
	}
	return nil
}
