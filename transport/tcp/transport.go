package tcp

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"coord/raft"
)

// ErrInvalidConfig wraps every Config.Validate failure.
var ErrInvalidConfig = errors.New("transport/tcp: invalid config")

// Config configures a Transport. Start from DefaultConfig.
type Config struct {
	// ID is this node's ID; never 0.
	ID uint64
	// Listener accepts peers' connections. If nil, ListenAddr is listened
	// on.
	Listener   net.Listener
	ListenAddr string
	// Peers maps the other nodes' IDs to their addresses. This node's own
	// ID may appear and is ignored.
	Peers map[uint64]string
	// Meta is sent to every peer in the handshake; peers read it with
	// PeerMeta. The server sends its HTTP address.
	Meta string

	// Deliver receives every valid message addressed to this node, on the
	// connection's reader goroutine: it must not block for long (the node
	// shell queues, and drops when full, as a network would).
	Deliver func(raft.Message)
	// Unreachable, if set, is told when a message to a peer was dropped
	// because the peer is not connected or too slow, so that the leader
	// probes it rather than pipelining (raft.Core.ReportUnreachable).
	Unreachable func(id uint64)
	// SnapshotDone, if set, is told when a snapshot was sent to a peer in
	// full, or failed (raft.Core.ReportSnapshot).
	SnapshotDone func(id uint64, failed bool)
	// Dropped, if set, counts dropped messages by reason (metrics).
	Dropped func(reason string)
	// PeerClosed, if set, is told when the connection in use to a peer
	// was closed from the peer's end: its reader met EOF or a reset, or
	// its writer a reset or a broken pipe, and this end had not closed it.
	// It is not told of timeouts, failed dials, malformed frames, a newer
	// connection replacing an older one, or Close. On a host that lives,
	// the kernel closes a process's connections when the process dies, so
	// the node takes this as a hint that the peer is gone
	// (raft.Core.ReportPeerGone). It runs on the connection's goroutine
	// and must not block.
	PeerClosed func(id uint64)

	// QueueMessages bounds the messages waiting for one peer's connection;
	// beyond it, sends to that peer are dropped.
	QueueMessages int
	// MaxFrameBytes bounds one frame, and so one message's entries.
	MaxFrameBytes int
	// SpoolSnapshot, if set, takes the data of every snapshot received, a
	// chunk at a time as it arrives, instead of the transport assembling
	// it in memory: it is called with the snapshot's message (without
	// data) and size when the stream begins. The message is delivered
	// with Snapshot.Source set to what the spool's Commit returned, once
	// the whole stream arrived intact. A stream that breaks off, overruns
	// its size or carries a bad frame is aborted (SnapshotSpool.Abort)
	// and nothing is delivered. An error from SpoolSnapshot, Write or
	// Commit (a stale snapshot, a full disk) is logged, and the rest of
	// the stream is read and dropped. The server spools to the data
	// directory (raftstore.Disk.ReceiveSnapshot).
	SpoolSnapshot func(m raft.Message, size int64) (SnapshotSpool, error)
	// MaxSnapshotBytes bounds a snapshot received; 0 (the default) means
	// no bound but the disk's when SpoolSnapshot is set. Without
	// SpoolSnapshot the data is held in memory, and bounded by the smaller
	// of MaxSnapshotBytes (if not 0) and MaxSnapshotMemoryBytes.
	MaxSnapshotBytes int64
	// SnapshotChunkBytes is the size of the chunks a snapshot is streamed
	// in; messages to the same peer go between chunks.
	SnapshotChunkBytes int
	// DialTimeout bounds a connection attempt and its handshake.
	DialTimeout time.Duration
	// WriteTimeout bounds each slice of at most WriteSliceBytes written to
	// a peer: a peer that does not read (paused, partitioned) loses its
	// connection instead of blocking the writer. The deadline is renewed
	// for every slice, so a large message or batch is judged by its
	// progress, not by a deadline meant for a small one: a peer must read
	// at least WriteSliceBytes per WriteTimeout (128 KiB/s by default).
	WriteTimeout time.Duration
	// DirectWriteMaxBytes bounds the frames Send writes to a peer's
	// socket itself, on the caller's goroutine, when nothing is queued for
	// that peer and no write to it is in progress: the messages leave at
	// once instead of when the peer's writer goroutine is next scheduled
	// (a leader's appends otherwise left about 0.4 ms into its own fsync
	// on a loaded machine). The write never waits: what the socket buffer
	// does not take at once is left to the writer goroutine. Larger
	// batches, and every message while others are queued, go through the
	// queue. 0 disables direct writes.
	DirectWriteMaxBytes int
	// BackoffMin and BackoffMax bound the wait between dial attempts.
	BackoffMin, BackoffMax time.Duration

	// TLS, if set, runs every connection over mutual TLS, and binds each
	// connection to the node its certificate names: a hello that claims
	// another node, or an acceptor that is not the node dialed, is
	// refused. Nil: plain TCP, where a hello is taken at its word
	// (`coord server --insecure`).
	TLS *TLSConfig

	// Logger logs connections and rejected frames. Nil: slog.Default().
	Logger *slog.Logger

	// beforeAdopt, if set, runs after an incoming handshake is answered
	// and before the connection is adopted: tests widen that window.
	beforeAdopt func(from uint64)
}

// TLSConfig is the transport's TLS: the configurations of both ends of a
// connection, and how to read the node a verified certificate names.
type TLSConfig struct {
	// Server accepts peers, Client dials them. Each must require the
	// other end's certificate and verify it (pki.PeerConfigs does, for
	// nodes of one cluster).
	Server, Client *tls.Config
	// PeerID returns the node ID the verified certificate of a connection
	// names (pki.NodeOf).
	PeerID func(tls.ConnectionState) (uint64, error)
}

// DefaultConfig returns a Config with coord's defaults; ID, the listener,
// Peers and Deliver are left for the caller.
func DefaultConfig() Config {
	return Config{
		QueueMessages:       4096,
		MaxFrameBytes:       16 << 20,
		SnapshotChunkBytes:  256 << 10,
		DialTimeout:         time.Second,
		WriteTimeout:        2 * time.Second,
		DirectWriteMaxBytes: 16 << 10,
		BackoffMin:          20 * time.Millisecond,
		BackoffMax:          time.Second,
	}
}

// Validate names the first field missing or out of range.
func (c Config) Validate() error {
	switch {
	case c.ID == 0:
		return fmt.Errorf("%w: ID must not be 0", ErrInvalidConfig)
	case c.Listener == nil && c.ListenAddr == "":
		return fmt.Errorf("%w: neither Listener nor ListenAddr set", ErrInvalidConfig)
	case c.Deliver == nil:
		return fmt.Errorf("%w: Deliver is nil", ErrInvalidConfig)
	case c.QueueMessages <= 0:
		return fmt.Errorf("%w: QueueMessages %d must be positive", ErrInvalidConfig, c.QueueMessages)
	case c.MaxFrameBytes < 1024:
		return fmt.Errorf("%w: MaxFrameBytes %d under 1024", ErrInvalidConfig, c.MaxFrameBytes)
	case c.SnapshotChunkBytes <= 0 || c.SnapshotChunkBytes > c.MaxFrameBytes-64:
		return fmt.Errorf("%w: SnapshotChunkBytes %d must be in (0, MaxFrameBytes-64]", ErrInvalidConfig, c.SnapshotChunkBytes)
	case c.DirectWriteMaxBytes < 0 || c.DirectWriteMaxBytes > c.MaxFrameBytes:
		return fmt.Errorf("%w: DirectWriteMaxBytes %d must be in [0, MaxFrameBytes]", ErrInvalidConfig, c.DirectWriteMaxBytes)
	case c.MaxSnapshotBytes < 0:
		return fmt.Errorf("%w: MaxSnapshotBytes %d must not be negative", ErrInvalidConfig, c.MaxSnapshotBytes)
	case c.DialTimeout <= 0 || c.WriteTimeout <= 0:
		return fmt.Errorf("%w: DialTimeout %v and WriteTimeout %v must be positive", ErrInvalidConfig, c.DialTimeout, c.WriteTimeout)
	case c.BackoffMin <= 0 || c.BackoffMax < c.BackoffMin:
		return fmt.Errorf("%w: BackoffMin %v and BackoffMax %v: want 0 < min <= max", ErrInvalidConfig, c.BackoffMin, c.BackoffMax)
	case c.TLS != nil && (c.TLS.Server == nil || c.TLS.Client == nil || c.TLS.PeerID == nil):
		return fmt.Errorf("%w: TLS needs Server, Client and PeerID", ErrInvalidConfig)
	}
	for id, addr := range c.Peers {
		if id == 0 || (addr == "" && id != c.ID) {
			return fmt.Errorf("%w: peer %d at %q", ErrInvalidConfig, id, addr)
		}
	}
	return nil
}

// Transport carries raft messages between nodes over TCP: framed binary
// messages (see the package doc), one connection per pair of nodes (the
// node with the lower ID dials; either side may, and a newer connection
// replaces an older one), reconnection with jittered exponential backoff,
// pipelined appends, snapshots streamed in chunks.
//
// Send never blocks: a message to a peer that is unknown, not connected or
// not keeping up is dropped, as a network drops packets to a dead machine.
//
// Transport is safe for concurrent use.
type Transport struct {
	cfg      Config
	log      *slog.Logger
	listener net.Listener
	done     chan struct{}
	wg       sync.WaitGroup

	mu     sync.Mutex
	peers  map[uint64]*peer
	closed bool

	// peersChanged is closed when a peer's connection comes or goes
	// (PeersChanged); nil until someone waits for it, so that nothing is
	// made for a change no one watches.
	changedMu    sync.Mutex
	peersChanged chan struct{}

	// directMessages counts the messages Send wrote itself, and
	// directCarried the direct writes whose tail the socket did not take
	// at once: tests check which path their messages took.
	directMessages, directCarried atomic.Int64
}

// peer is one remote node: its queues and its connection.
//
// The connection in use is written under writing, by the writer goroutine
// for each batch it takes from the queues, or by Send for a direct write
// (which only tries the lock). Per-peer order holds because a direct write
// is made only when pending is 0 under the lock: every message queued
// before it has been written (or dropped) by then.
type peer struct {
	id       uint64
	queue    chan raft.Message
	snapshot chan raft.Message
	conns    chan *conn    // new connections for the writer
	kick     chan struct{} // a direct write left bytes for the writer
	stop     chan struct{}
	// pending counts the messages queued and not yet written or dropped.
	pending atomic.Int64

	writing sync.Mutex
	cur     *conn         // the connection written to; under writing
	w       *bufio.Writer // cur's buffered writer, empty between batches; under writing
	frames  []byte        // a write's frames, reused (keepFrames); under writing

	mu        sync.Mutex
	addr      string
	meta      string
	connected bool
	current   *conn
}

// conn is one established connection to a peer.
type conn struct {
	net.Conn       // the TLS connection over raw, or raw itself
	raw      *sock // the TCP connection
	peer     *peer
	closed   chan struct{}
	once     sync.Once
	// byPeer is set by the writer when a write failed because the peer
	// had closed the connection (a reset, a broken pipe): the reader then
	// finds it closed by this end, but the peer closed it first.
	byPeer atomic.Bool
}

// close closes the TCP connection itself: a TLS close alert could wait on
// a peer that does not read, and the frames' own lengths already tell a
// truncated stream from a finished one.
func (c *conn) close() {
	c.once.Do(func() {
		c.raw.Close()
		close(c.closed)
	})
}

// New starts a transport: it listens, accepts, and dials the peers whose
// ID is greater than its own.
func New(cfg Config) (*Transport, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	l := cfg.Listener
	if l == nil {
		var err error
		if l, err = net.Listen("tcp", cfg.ListenAddr); err != nil {
			return nil, fmt.Errorf("transport/tcp: listen %s: %w", cfg.ListenAddr, err)
		}
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.Default()
	}
	t := &Transport{cfg: cfg, log: logger.With("node", cfg.ID), listener: l, done: make(chan struct{}), peers: map[uint64]*peer{}}
	for id, addr := range cfg.Peers {
		if id != cfg.ID {
			t.AddPeer(id, addr)
		}
	}
	t.wg.Add(1)
	go t.accept()
	return t, nil
}

// Addr returns the address the transport listens on.
func (t *Transport) Addr() net.Addr { return t.listener.Addr() }

// AddPeer adds a peer, or changes a known peer's address (the current
// connection stays until it breaks).
func (t *Transport) AddPeer(id uint64, addr string) {
	if id == t.cfg.ID || id == 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return
	}
	if p := t.peers[id]; p != nil {
		p.mu.Lock()
		p.addr = addr
		p.mu.Unlock()
		return
	}
	p := &peer{
		id: id, addr: addr,
		queue:    make(chan raft.Message, t.cfg.QueueMessages),
		snapshot: make(chan raft.Message, 1),
		conns:    make(chan *conn, 1),
		kick:     make(chan struct{}, 1),
		stop:     make(chan struct{}),
	}
	t.peers[id] = p
	t.wg.Add(1)
	go t.write(p)
	if t.cfg.ID < id {
		t.wg.Add(1)
		go t.dial(p)
	}
}

// RemovePeer forgets a peer: its connection is closed, and its messages
// and connections are refused from now on.
func (t *Transport) RemovePeer(id uint64) {
	t.mu.Lock()
	p := t.peers[id]
	delete(t.peers, id)
	t.mu.Unlock()
	if p != nil {
		p.shutdown()
		t.notifyPeersChanged()
	}
}

// shutdown stops the peer's writer and dialer and closes its connection.
// stop is closed before p.mu is taken, and adopt checks it under p.mu: a
// connection adopted concurrently is either refused or found here.
func (p *peer) shutdown() {
	close(p.stop)
	p.mu.Lock()
	if p.current != nil {
		p.current.close()
	}
	p.mu.Unlock()
}

// PeersChanged returns a channel that is closed when a peer's connection
// next comes or goes, or a peer is removed: when what PeerMeta says of
// connected may have changed. Take it before calling PeerMeta, so that no
// change falls in between.
func (t *Transport) PeersChanged() <-chan struct{} {
	t.changedMu.Lock()
	defer t.changedMu.Unlock()
	if t.peersChanged == nil {
		t.peersChanged = make(chan struct{})
	}
	return t.peersChanged
}

// notifyPeersChanged wakes the callers waiting on PeersChanged, if any.
func (t *Transport) notifyPeersChanged() {
	t.changedMu.Lock()
	defer t.changedMu.Unlock()
	if t.peersChanged != nil {
		close(t.peersChanged)
		t.peersChanged = nil
	}
}

// PeerMeta returns the Meta a peer sent in its last handshake, and whether
// it is connected now.
func (t *Transport) PeerMeta(id uint64) (meta string, connected bool) {
	t.mu.Lock()
	p := t.peers[id]
	t.mu.Unlock()
	if p == nil {
		return "", false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.meta, p.connected
}

func (t *Transport) peer(id uint64) *peer {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.peers[id]
}

func (t *Transport) drop(reason string, m raft.Message) {
	if t.cfg.Dropped != nil {
		t.cfg.Dropped(reason)
	}
	if m.Type == raft.MsgSnapshotRequest {
		if t.cfg.SnapshotDone != nil {
			t.cfg.SnapshotDone(m.To, true)
		}
		return
	}
	if t.cfg.Unreachable != nil && reason != "unknown peer" {
		t.cfg.Unreachable(m.To)
	}
}

// Send hands messages to their recipients' connections and returns at
// once: it writes a peer's messages itself when nothing is queued for that
// peer and the socket takes them without waiting (Config.DirectWriteMaxBytes),
// and queues them otherwise. A message to an unknown peer, or to a peer
// whose queue is full, is dropped. Messages to one peer keep their order.
func (t *Transport) Send(msgs []raft.Message) {
	if t.cfg.DirectWriteMaxBytes > 0 && directWrites {
		t.sendDirect(msgs)
		return
	}
	for _, m := range msgs {
		if p := t.peer(m.To); p != nil {
			t.enqueue(p, m)
		} else {
			t.drop("unknown peer", m)
		}
	}
}

// enqueue queues m for p's writer goroutine, or drops it if the queue is
// full.
func (t *Transport) enqueue(p *peer, m raft.Message) {
	q := p.queue
	if m.Type == raft.MsgSnapshotRequest {
		q = p.snapshot
	} else {
		p.pending.Add(1)
	}
	select {
	case q <- m:
	default:
		if m.Type != raft.MsgSnapshotRequest {
			p.pending.Add(-1)
		}
		t.drop("queue full", m)
	}
}

// Close stops the transport: the listener and every connection close, and
// every goroutine it started has returned when Close returns.
func (t *Transport) Close() error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	peers := t.peers
	t.peers = map[uint64]*peer{}
	t.mu.Unlock()
	close(t.done)
	err := t.listener.Close()
	for _, p := range peers {
		p.shutdown()
	}
	t.wg.Wait()
	return err
}

// accept serves incoming connections.
func (t *Transport) accept() {
	defer t.wg.Done()
	for {
		nc, err := t.listener.Accept()
		if err != nil {
			select {
			case <-t.done:
				return
			default:
			}
			t.log.Warn("accept failed", "err", err)
			time.Sleep(10 * time.Millisecond) // a transient error (EMFILE) must not spin
			continue
		}
		t.wg.Add(1)
		go func() {
			defer t.wg.Done()
			t.handshakeIncoming(nc)
		}()
	}
}

// handshakeIncoming checks a dialer's hello and, if it names a known peer
// and this node, answers and adopts the connection. With TLS, the TLS
// handshake comes first, and the hello must claim the node the dialer's
// certificate names: nothing a dialer sends reaches the node unless both
// hold.
func (t *Transport) handshakeIncoming(accepted net.Conn) {
	raw := newSock(accepted)
	_ = raw.SetDeadline(time.Now().Add(t.cfg.DialTimeout))
	var nc net.Conn = raw
	reject := func(reason string, args ...any) {
		t.log.Warn("rejected connection", append([]any{"remote", raw.RemoteAddr().String(), "reason", reason}, args...)...)
		raw.Close()
	}
	var certID uint64
	if t.cfg.TLS != nil {
		tc := tls.Server(raw, t.cfg.TLS.Server)
		ctx, cancel := context.WithTimeout(context.Background(), t.cfg.DialTimeout)
		err := tc.HandshakeContext(ctx)
		cancel()
		if err != nil {
			reject("tls handshake", "err", err)
			return
		}
		if certID, err = t.cfg.TLS.PeerID(tc.ConnectionState()); err != nil {
			reject("tls certificate", "err", err)
			return
		}
		nc = tc
	}
	typ, payload, err := readFrame(nc, 4096)
	if err != nil {
		reject("reading hello", "err", err)
		return
	}
	if typ != frameHello {
		reject("first frame is not a hello", "type", typ)
		return
	}
	h, err := unmarshalHello(payload)
	switch {
	case err != nil:
		reject("malformed hello", "err", err)
		return
	case h.Version != ProtocolVersion:
		reject("protocol version", "version", h.Version, "want", ProtocolVersion)
		return
	case h.To != t.cfg.ID:
		reject("hello addressed to another node", "to", h.To)
		return
	case t.cfg.TLS != nil && h.From != certID:
		reject("hello claims another node than its certificate names", "from", h.From, "certificate_node", certID)
		return
	}
	p := t.peer(h.From)
	if p == nil {
		reject("unknown or removed node", "from", h.From)
		return
	}
	ack := hello{Version: ProtocolVersion, From: t.cfg.ID, To: h.From, Meta: t.cfg.Meta}
	if _, err := nc.Write(appendFrame(nil, frameHelloAck, ack.marshal())); err != nil {
		reject("writing hello ack", "err", err)
		return
	}
	_ = raw.SetDeadline(time.Time{})
	if t.cfg.beforeAdopt != nil {
		t.cfg.beforeAdopt(h.From)
	}
	c := t.adopt(p, nc, raw, h.Meta)
	if c == nil {
		reject("node removed during the handshake", "from", h.From)
		return
	}
	t.read(c)
}

// adopt makes nc the peer's connection, replacing (and closing) any other.
// It returns nil, leaving nc to the caller to close, if the peer has been
// shut down (removed, or the transport closed) since the caller looked it
// up: shutdown closes only the connection it finds, so one adopted after
// it would be read forever, and Close would wait for that reader.
func (t *Transport) adopt(p *peer, nc net.Conn, raw *sock, meta string) *conn {
	c := &conn{Conn: nc, raw: raw, peer: p, closed: make(chan struct{})}
	p.mu.Lock()
	select {
	case <-p.stop:
		p.mu.Unlock()
		return nil
	default:
	}
	old := p.current
	p.current, p.meta, p.connected = c, meta, true
	// Under p.mu, so that two adoptions cannot both find the slot empty:
	// the push never blocks.
	select {
	case <-p.conns: // an older connection the writer never picked up
	default:
	}
	p.conns <- c
	p.mu.Unlock()
	t.notifyPeersChanged()
	if old != nil {
		old.close()
	}
	t.log.Debug("peer connected", "peer", p.id, "remote", nc.RemoteAddr().String())
	return c
}

// dial keeps a connection to a peer with a greater ID open: it dials, and
// dials again with backoff whenever the connection breaks.
func (t *Transport) dial(p *peer) {
	defer t.wg.Done()
	backoff := t.cfg.BackoffMin
	for {
		p.mu.Lock()
		addr := p.addr
		p.mu.Unlock()
		c, err := t.dialOnce(p, addr)
		if err == nil {
			backoff = t.cfg.BackoffMin
			t.wg.Add(1)
			go func() {
				defer t.wg.Done()
				t.read(c)
			}()
			select {
			case <-c.closed:
			case <-p.stop:
				return
			case <-t.done:
				return
			}
		} else {
			t.log.Debug("dial failed", "peer", p.id, "addr", addr, "err", err)
		}
		wait := backoff/2 + rand.N(backoff/2+1)
		backoff = min(2*backoff, t.cfg.BackoffMax)
		select {
		case <-time.After(wait):
		case <-p.stop:
			return
		case <-t.done:
			return
		}
	}
}

func (t *Transport) dialOnce(p *peer, addr string) (*conn, error) {
	d := net.Dialer{Timeout: t.cfg.DialTimeout, KeepAlive: 5 * time.Second}
	dialed, err := d.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	raw := newSock(dialed)
	_ = raw.SetDeadline(time.Now().Add(t.cfg.DialTimeout))
	nc, err := t.secureDial(raw, p.id)
	if err != nil {
		raw.Close()
		t.log.Warn("rejected connection", "peer", p.id, "addr", addr, "reason", err)
		return nil, err
	}
	h := hello{Version: ProtocolVersion, From: t.cfg.ID, To: p.id, Meta: t.cfg.Meta}
	if _, err := nc.Write(appendFrame(nil, frameHello, h.marshal())); err != nil {
		raw.Close()
		return nil, fmt.Errorf("write hello: %w", err)
	}
	typ, payload, err := readFrame(nc, 4096)
	if err != nil {
		raw.Close()
		return nil, fmt.Errorf("read hello ack: %w", err)
	}
	ack, err := unmarshalHello(payload)
	if err == nil && (typ != frameHelloAck || ack.From != p.id || ack.To != t.cfg.ID) {
		err = fmt.Errorf("%w: hello ack from node %d to %d (type %d), want from %d", ErrMalformed, ack.From, ack.To, typ, p.id)
	}
	if err != nil {
		raw.Close()
		t.log.Warn("rejected connection", "peer", p.id, "addr", addr, "reason", err)
		return nil, err
	}
	_ = raw.SetDeadline(time.Time{})
	c := t.adopt(p, nc, raw, ack.Meta)
	if c == nil {
		raw.Close()
		return nil, fmt.Errorf("peer %d removed during the handshake", p.id)
	}
	return c, nil
}

// secureDial runs the TLS handshake on a dialed connection, if the
// transport uses TLS, and checks that the acceptor's certificate names the
// node dialed (an address can be taken over; a certificate cannot).
func (t *Transport) secureDial(raw net.Conn, id uint64) (net.Conn, error) {
	if t.cfg.TLS == nil {
		return raw, nil
	}
	tc := tls.Client(raw, t.cfg.TLS.Client)
	ctx, cancel := context.WithTimeout(context.Background(), t.cfg.DialTimeout)
	defer cancel()
	if err := tc.HandshakeContext(ctx); err != nil {
		return nil, fmt.Errorf("tls handshake: %w", err)
	}
	certID, err := t.cfg.TLS.PeerID(tc.ConnectionState())
	if err != nil {
		return nil, fmt.Errorf("tls certificate: %w", err)
	}
	if certID != id {
		return nil, fmt.Errorf("%w: dialed node %d, its certificate names node %d", ErrMalformed, id, certID)
	}
	return tc, nil
}

// read delivers the frames of one connection until it breaks. A malformed
// frame closes the connection; a message that claims the wrong sender or
// recipient is dropped. Both are logged with the reason.
func (t *Transport) read(c *conn) {
	var readErr error
	defer func() { t.disconnected(c, readErr) }()
	r := bufio.NewReaderSize(c, 64<<10)
	var snap *receiving // the snapshot being received, if any
	defer func() {
		if snap != nil {
			snap.abort() // a torn stream: nothing of it stays
		}
	}()
	for {
		typ, payload, err := readFrame(r, t.cfg.MaxFrameBytes)
		if err != nil {
			readErr = err
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				t.log.Debug("connection closed", "peer", c.peer.id, "err", err)
				if errors.Is(err, ErrMalformed) {
					t.log.Warn("rejected frame", "peer", c.peer.id, "reason", err)
				}
			}
			return
		}
		switch typ {
		case frameMessage:
			m, err := unmarshalMessage(payload)
			if err != nil {
				t.log.Warn("rejected frame", "peer", c.peer.id, "reason", err)
				return
			}
			t.deliver(c, m)
		case frameSnapshotBegin:
			if snap != nil {
				t.log.Warn("rejected frame", "peer", c.peer.id, "reason", "snapshot begins inside another")
				return
			}
			if snap, err = t.beginSnapshot(c, payload); err != nil {
				t.log.Warn("rejected frame", "peer", c.peer.id, "reason", err)
				return
			}
		case frameSnapshotChunk:
			if snap == nil {
				t.log.Warn("rejected frame", "peer", c.peer.id, "reason", "snapshot chunk outside a snapshot")
				return
			}
			last, err := snap.chunk(payload)
			if err != nil {
				t.log.Warn("rejected frame", "peer", c.peer.id, "reason", err)
				return
			}
			if last {
				m, ok := snap.finish()
				snap = nil
				if ok {
					t.deliver(c, m)
				}
			}
		default:
			t.log.Warn("rejected frame", "peer", c.peer.id, "reason", fmt.Sprintf("unknown frame type %d", typ))
			return
		}
	}
}

func (t *Transport) deliver(c *conn, m raft.Message) {
	if m.From != c.peer.id || m.To != t.cfg.ID {
		t.log.Warn("rejected message", "peer", c.peer.id, "reason",
			fmt.Sprintf("message %d->%d on the connection from node %d to node %d", m.From, m.To, c.peer.id, t.cfg.ID))
		return
	}
	if t.peer(m.From) != c.peer {
		return // removed while the frame was in flight
	}
	t.cfg.Deliver(m)
}

// disconnected forgets a connection whose reader ended with err (nil for
// a frame this end refused), and tells PeerClosed if the peer closed the
// connection in use. It tells before it closes and forgets the
// connection, so that whoever sees it closed or forgotten knows the
// report was made, if any.
func (t *Transport) disconnected(c *conn, err error) {
	byPeer := (closedByPeer(err) && !isClosed(c)) || c.byPeer.Load()
	p := c.peer
	p.mu.Lock()
	current := p.current == c
	p.mu.Unlock()
	if byPeer && current && t.cfg.PeerClosed != nil {
		select {
		case <-t.done:
		case <-p.stop:
		default:
			t.log.Debug("connection closed by the peer", "peer", p.id, "err", err)
			t.cfg.PeerClosed(p.id)
		}
	}
	c.close()
	p.mu.Lock()
	forgotten := p.current == c
	if forgotten {
		p.current, p.connected = nil, false
	}
	p.mu.Unlock()
	if forgotten {
		t.notifyPeersChanged()
	}
}

// closedByPeer reports whether a read or write error says the other end
// closed the connection: an EOF (possibly mid-frame), a reset or a broken
// pipe. A timeout, or a close of this end's own, is not.
func closedByPeer(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// write sends a peer's queued messages on its current connection, batching
// what is queued into one flush, and what a direct write left unwritten.
// With no connection, messages are dropped. It holds p.writing for each
// batch, so that Send's direct writes go between batches, never inside.
func (t *Transport) write(p *peer) {
	defer t.wg.Done()
	for {
		select {
		case <-t.done:
			return
		case <-p.stop:
			return
		case c := <-p.conns:
			p.writing.Lock()
			t.use(p, c)
			p.writing.Unlock()
		case <-p.kick:
			p.writing.Lock()
			if p.cur != nil {
				_ = p.cur.SetWriteDeadline(time.Now().Add(t.cfg.WriteTimeout))
				if err := p.cur.raw.flushCarry(); err != nil {
					t.fail(p, err)
				}
			}
			p.writing.Unlock()
		case m := <-p.queue:
			p.writing.Lock()
			written := int64(1)
			if t.connected(p, m) {
				var err error
				if written, err = t.writeBatch(p, m); err != nil {
					t.fail(p, err)
					t.drop("write failed", m)
				}
			}
			// Under p.writing, after the flush: a direct write that finds
			// pending at 0 comes after every message counted here.
			p.pending.Add(-written)
			p.writing.Unlock()
		case m := <-p.snapshot:
			p.writing.Lock()
			if !t.connected(p, m) {
				p.writing.Unlock()
				continue
			}
			err := t.writeSnapshot(p, m)
			if t.cfg.SnapshotDone != nil {
				t.cfg.SnapshotDone(p.id, err != nil)
			}
			if err != nil {
				t.fail(p, err)
			}
			p.writing.Unlock()
		}
	}
}

// use makes c the connection written to, closing the one it replaces.
// The caller holds p.writing.
func (t *Transport) use(p *peer, c *conn) {
	if p.cur != nil && p.cur != c {
		p.cur.close()
	}
	p.cur, p.w = c, bufio.NewWriterSize(progressWriter{c, t.cfg.WriteTimeout}, 64<<10)
}

// connected makes sure there is an open connection to write m on, taking
// one that arrived since; with none, m is dropped. The caller holds
// p.writing.
func (t *Transport) connected(p *peer, m raft.Message) bool {
	if p.cur != nil && !isClosed(p.cur) {
		return true
	}
	select {
	case c := <-p.conns:
		t.use(p, c)
		return true
	default:
		t.drop("not connected", m)
		return false
	}
}

// fail closes the connection a write to failed with err. The caller holds
// p.writing.
func (t *Transport) fail(p *peer, err error) {
	t.log.Debug("write failed", "peer", p.id, "err", err)
	if closedByPeer(err) {
		p.cur.byPeer.Store(true)
	}
	p.cur.close()
	p.cur, p.w = nil, nil
}

// WriteSliceBytes is the most written to a peer under one write deadline
// (Config.WriteTimeout).
const WriteSliceBytes = 256 << 10

// progressWriter writes to a connection in slices of at most
// WriteSliceBytes, each under a fresh deadline of timeout: a message of
// many MB, or a batch of many messages, goes through as long as the peer
// keeps reading, and a peer that stops reading is cut off one timeout
// after it stopped, whatever the size of what was being written.
type progressWriter struct {
	c       *conn
	timeout time.Duration
}

func (pw progressWriter) Write(b []byte) (int, error) {
	written := 0
	for len(b) > 0 {
		n := min(len(b), WriteSliceBytes)
		_ = pw.c.SetWriteDeadline(time.Now().Add(pw.timeout))
		k, err := pw.c.Write(b[:n])
		written += k
		if err != nil {
			return written, err
		}
		b = b[n:]
	}
	return written, nil
}

func isClosed(c *conn) bool {
	select {
	case <-c.closed:
		return true
	default:
		return false
	}
}

// writeBatch writes m and whatever else is queued, then flushes: appends
// are pipelined, never waiting for acknowledgements. It returns how many
// messages it took from the queue. The caller holds p.writing.
func (t *Transport) writeBatch(p *peer, m raft.Message) (taken int64, err error) {
	taken = 1
	if err := t.writeMessage(p, m); err != nil {
		return taken, err
	}
	for range 256 {
		select {
		case m := <-p.queue:
			taken++
			if err := t.writeMessage(p, m); err != nil {
				return taken, err
			}
			continue
		default:
		}
		break
	}
	return taken, p.w.Flush()
}

// writeMessage writes m's frame to p's buffered writer, encoded in p's
// frame buffer (p.frames). The caller holds p.writing.
func (t *Transport) writeMessage(p *peer, m raft.Message) error {
	frame := appendMessageFrame(p.frames[:0], m)
	p.frames = keepFrames(frame)
	if len(frame)-frameHeaderBytes-frameTrailerBytes > t.cfg.MaxFrameBytes {
		// The core bounds entries per message; a message over the frame
		// limit is dropped here rather than rejected by the peer.
		t.drop("too large", m)
		return nil
	}
	_, err := p.w.Write(frame)
	return err
}

// keepFrames returns the frame buffer to keep for the next write: frames,
// unless a burst grew it past frameBufferKeepBytes.
func keepFrames(frames []byte) []byte {
	if cap(frames) > frameBufferKeepBytes {
		return nil
	}
	return frames[:0]
}

// frameBufferKeepBytes bounds the frame buffer a peer keeps between
// writes: enough for the appends of a busy leader, not a large entry's.
const frameBufferKeepBytes = 1 << 20

// writeSnapshot streams a snapshot in chunks, read from its Source (a
// file) or Data as they go, sending the peer's other messages between
// chunks so that heartbeats are not stuck behind it. Only one chunk is in
// memory at a time. A read error (a damaged file: its reader checks the
// checksum with the last bytes) ends the stream before its last chunk,
// so the peer never takes it; the connection is then closed.
func (t *Transport) writeSnapshot(p *peer, m raft.Message) error {
	w := p.w
	size := m.Snapshot.Size()
	r, err := m.Snapshot.Open()
	if err != nil {
		t.log.Warn("snapshot not sent", "peer", p.id, "index", m.Snapshot.Metadata.Index, "err", err)
		return fmt.Errorf("open snapshot: %w", err)
	}
	defer r.Close()
	if _, err := w.Write(appendFrame(nil, frameSnapshotBegin, marshalSnapshotBegin(m, size))); err != nil {
		return err
	}
	chunk := make([]byte, t.cfg.SnapshotChunkBytes+1)
	frame := make([]byte, 0, frameHeaderBytes+len(chunk)+frameTrailerBytes)
	for off := int64(0); ; {
		n := min(int64(t.cfg.SnapshotChunkBytes), size-off)
		if _, err := io.ReadFull(r, chunk[1:1+n]); err != nil {
			t.log.Warn("snapshot not sent", "peer", p.id, "index", m.Snapshot.Metadata.Index, "err", err)
			return fmt.Errorf("read snapshot at byte %d of %d: %w", off, size, err)
		}
		end := off + n
		chunk[0] = 0
		if end == size {
			chunk[0] = 1
		}
		last := chunk[0]
		frame = appendFrame(frame[:0], frameSnapshotChunk, chunk[:1+n])
		if _, err := w.Write(frame); err != nil {
			return err
		}
		if err := w.Flush(); err != nil {
			return err
		}
		if last == 1 {
			return nil
		}
		off = end
		// Interleave: whatever else is queued goes now.
		select {
		case m := <-p.queue:
			taken, err := t.writeBatch(p, m)
			p.pending.Add(-taken)
			if err != nil {
				return err
			}
		default:
		}
	}
}
