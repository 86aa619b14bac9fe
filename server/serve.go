package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"coord/apiwire"
)

// Options are the command-line settings of one server (`coord server`).
// Register binds them to a flag set; Config turns them into a Config.
type Options struct {
	ID              uint64
	Listen          string
	HTTP            string
	Peers           string
	Data            string
	Join            bool
	ClusterID       string
	Tick            time.Duration
	ElectionTicks   int
	HeartbeatTicks  int
	SnapshotEntries uint64
	SnapshotBytes   uint64
	WALSegmentBytes int64
	PeerCloseHint   bool
	HandOverMax     time.Duration
	// SnapshotLogPercent is --snapshot-log-percent
	// (Config.SnapshotLogPercent).
	SnapshotLogPercent uint64
	// LeaseSessionGrace is --lease-session-grace (Config.LeaseSessionGrace).
	LeaseSessionGrace time.Duration
	// Security are the TLS and token flags (security.go).
	Security SecurityOptions
	// HTTPLimits bound the API's clients (--http-max-watches and others).
	HTTPLimits HTTPLimits
	// Pprof serves /debug/pprof/ on the API (--pprof).
	Pprof bool
	// HTTP2 serves the API over HTTP/2 too (--http2, Config.HTTP2).
	HTTP2 bool
	// Wire serves the API over coord's multiplexed connection too (--wire,
	// the opposite of Config.NoWire).
	Wire bool
}

// Register defines the flags of Options on fs.
func (o *Options) Register(fs *pflag.FlagSet) {
	d := DefaultConfig()
	fs.Uint64Var(&o.ID, "id", 0, "this node's ID, a positive integer (required)")
	fs.StringVar(&o.Listen, "listen", "", "address of the Raft transport (default: this node's address in --peers)")
	fs.StringVar(&o.HTTP, "http", "127.0.0.1:0", "address of the HTTP API")
	fs.StringVar(&o.Peers, "peers", "", "the cluster's nodes: 1=HOST:PORT,2=HOST:PORT,... (Raft addresses, this node's included; required)")
	fs.StringVar(&o.Data, "data", "", "data directory: write-ahead log and snapshots (required)")
	fs.BoolVar(&o.Join, "join", false, "join an existing cluster (after coord cluster add) instead of bootstrapping")
	fs.StringVar(&o.ClusterID, "cluster-id", "", "the cluster's ID, 16 hex digits (/v1/status shows it): recorded in a new data directory, checked against an existing one (default: derived from --peers when bootstrapping, unknown when joining)")
	fs.DurationVar(&o.Tick, "tick", d.TickInterval, "length of one Raft tick")
	fs.IntVar(&o.ElectionTicks, "election-ticks", d.ElectionTicks, "election timeout in ticks (drawn from [n, 2n))")
	fs.IntVar(&o.HeartbeatTicks, "heartbeat-ticks", d.HeartbeatTicks, "heartbeat interval in ticks")
	fs.Uint64Var(&o.SnapshotEntries, "snapshot-entries", d.SnapshotEntries, "entries applied between snapshots")
	fs.Uint64Var(&o.SnapshotBytes, "snapshot-bytes", d.SnapshotBytes, "bytes of entries applied after which a snapshot is taken, however few the entries and whatever --snapshot-log-percent says: a cap on the log kept in memory (0: --snapshot-entries alone)")
	fs.Uint64Var(&o.SnapshotLogPercent, "snapshot-log-percent", d.SnapshotLogPercent, "once --snapshot-entries are reached, wait further (but not past --snapshot-bytes) until the entries applied since the last snapshot are this percentage of its size (up to a quarter more, drawn per snapshot so that the nodes do not snapshot together): snapshots then cost the same per write however large the state, and a restart replays at most about this share of it in log (0: --snapshot-entries and --snapshot-bytes alone)")
	fs.Int64Var(&o.WALSegmentBytes, "wal-segment-bytes", 0, "size past which the write-ahead log starts a new segment (0: 64 MiB)")
	fs.BoolVar(&o.PeerCloseHint, "peer-close-hint", d.PeerCloseHint, "take the leader's connection closing from its end as a hint that its process died, and elect a new leader at once (false: wait for the election timeout)")
	fs.DurationVar(&o.HandOverMax, "shutdown-handover", d.HandOverMax, "on SIGTERM, a leader hands leadership to its most up-to-date follower and waits at most this long for it to take over before exiting (0: exit at once, and the others elect a leader as after a crash)")
	fs.DurationVar(&o.LeaseSessionGrace, "lease-session-grace", SessionGraceDefault, fmt.Sprintf("how long after a raft:// lease holder's session stream closes from the holder's side (?session=true) the leader frees its lease; the holder steps down after half of it (%v to %v)", LeaseSessionGraceMin, LeaseSessionGraceMax))
	o.Security.Register(fs)
	o.HTTPLimits = d.HTTP
	o.HTTPLimits.Register(fs)
	fs.BoolVar(&o.Pprof, "pprof", false, "serve the Go profiler at /debug/pprof/ on the API (admin tokens only)")
	fs.BoolVar(&o.Wire, "wire", true, "serve the API over coord's multiplexed connection (coord-wire/1, docs/API.md) as well, on the same port: by TLS ALPN, or in plain mode to clients that open with its preface (coord/client speaks it by default, and HTTP/1.1 to a node run with --wire=false)")
	fs.BoolVar(&o.HTTP2, "http2", false, "serve the API over HTTP/2 as well as HTTP/1.1: by TLS ALPN (h2), or in plain mode (--insecure) to clients that speak h2c with prior knowledge (coord/client Config.HTTP2)")
}

// ParsePeers parses "1=HOST:PORT,2=HOST:PORT". Errors wrap ErrInvalid.
func ParsePeers(s string) (map[uint64]string, error) {
	peers := map[uint64]string{}
	if strings.TrimSpace(s) == "" {
		return nil, fmt.Errorf("%w: no peers", ErrInvalid)
	}
	for _, part := range strings.Split(s, ",") {
		idText, addr, ok := strings.Cut(strings.TrimSpace(part), "=")
		id, err := strconv.ParseUint(idText, 10, 64)
		if !ok || err != nil || id == 0 {
			return nil, fmt.Errorf("%w: peer %q: want ID=HOST:PORT with a positive ID", ErrInvalid, part)
		}
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return nil, fmt.Errorf("%w: peer %d address %q: %v", ErrInvalid, id, addr, err)
		}
		if _, dup := peers[id]; dup {
			return nil, fmt.Errorf("%w: peer %d listed twice", ErrInvalid, id)
		}
		peers[id] = addr
	}
	return peers, nil
}

// FormatPeers is the inverse of ParsePeers, in ID order.
func FormatPeers(peers map[uint64]string) string {
	ids := make([]uint64, 0, len(peers))
	for id := range peers {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = fmt.Sprintf("%d=%s", id, peers[id])
	}
	return strings.Join(parts, ",")
}

// Config returns the node Config the options describe. Errors wrap
// ErrInvalid and name the flag.
func (o Options) Config() (Config, error) {
	cfg := DefaultConfig()
	if o.ID == 0 {
		return cfg, fmt.Errorf("%w: --id is required (a positive integer)", ErrInvalid)
	}
	if o.Data == "" {
		return cfg, fmt.Errorf("%w: --data is required", ErrInvalid)
	}
	peers, err := ParsePeers(o.Peers)
	if err != nil {
		return cfg, fmt.Errorf("--peers: %w", err)
	}
	if o.Listen != "" {
		peers[o.ID] = o.Listen
	}
	if peers[o.ID] == "" {
		return cfg, fmt.Errorf("%w: --peers has no address for --id %d, and --listen is not set", ErrInvalid, o.ID)
	}
	if o.ClusterID != "" {
		id, err := strconv.ParseUint(o.ClusterID, 16, 64)
		if err != nil || id == 0 {
			return cfg, fmt.Errorf("%w: --cluster-id %q: want up to 16 hex digits, not all zero", ErrInvalid, o.ClusterID)
		}
		cfg.ClusterID = id
	}
	cfg.ID, cfg.Peers, cfg.DataDir, cfg.Join = o.ID, peers, o.Data, o.Join
	cfg.TickInterval, cfg.ElectionTicks, cfg.HeartbeatTicks, cfg.SnapshotEntries = o.Tick, o.ElectionTicks, o.HeartbeatTicks, o.SnapshotEntries
	cfg.SnapshotBytes = o.SnapshotBytes
	cfg.SnapshotLogPercent = o.SnapshotLogPercent
	cfg.WALSegmentBytes = o.WALSegmentBytes
	cfg.PeerCloseHint = o.PeerCloseHint
	cfg.HandOverMax = o.HandOverMax
	if o.LeaseSessionGrace < LeaseSessionGraceMin || o.LeaseSessionGrace > LeaseSessionGraceMax {
		return cfg, fmt.Errorf("%w: --lease-session-grace %v: want %v to %v (the holder steps down after half of it; keep-alives come every %v)",
			ErrInvalid, o.LeaseSessionGrace, LeaseSessionGraceMin, LeaseSessionGraceMax, SessionKeepAliveDefault)
	}
	cfg.LeaseSessionGrace = o.LeaseSessionGrace
	cfg.HTTP = o.HTTPLimits
	cfg.Pprof = o.Pprof
	cfg.HTTP2 = o.HTTP2
	cfg.NoWire = !o.Wire
	if err := cfg.HTTP.Validate(); err != nil {
		return cfg, fmt.Errorf("--http-max-*, --http-*-timeout: %w", err)
	}
	if err := cfg.Validate(); err != nil {
		return cfg, err
	}
	if cfg.Security, err = o.Security.Load(o.ID, cfg.Logger); err != nil {
		return cfg, err
	}
	return cfg, nil
}

// handOver hands leadership over before the node stops, within
// cfg.HandOverMax; the API still serves meanwhile, refusing or forwarding
// writes, so that clients find the next leader. It returns the node that
// took over, 0 if none did.
func handOver(node *Node, cfg Config, drain *handedOver) uint64 {
	if cfg.HandOverMax <= 0 {
		return 0
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.HandOverMax)
	defer cancel()
	leader, err := node.handOver(ctx, drain.early)
	if err != nil {
		logger(cfg.Logger).Warn("stopping without handing leadership over", "err", err)
		return 0
	}
	return leader
}

// Serve runs one node with its HTTP API (and /metrics) on httpAddr until
// ctx is done, then shuts both down, a leader first handing leadership
// over (Config.HandOverMax). ready, if not nil, is called once both
// listen, with their addresses. With cfg.Security, the API is HTTPS with
// tokens, and the certificates are reloaded on SIGHUP and when their
// files change; without, Serve logs a warning.
func Serve(ctx context.Context, cfg Config, httpAddr string, ready func(peer, http string)) error {
	hl, err := listenHTTP(httpAddr, cfg.Security, cfg.HTTP2, !cfg.NoWire)
	if err != nil {
		return err
	}
	cfg.HTTPAddr = hl.Addr().String()
	if cfg.Security == nil {
		logger(cfg.Logger).Warn("running insecure (--insecure): no TLS and no tokens; anyone who reaches the peer or API port can act as any node or client")
	} else {
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		cfg.Security.watch(wctx, logger(cfg.Logger))
	}
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics()
	}
	node, err := NewNode(cfg)
	if err != nil {
		hl.Close()
		return err
	}
	srv, limit := newServeHTTP(node, cfg)
	drain := newHandedOver(srv.Handler, node)
	srv.Handler = drain
	stoppable := newStoppableAPI(srv)
	var served net.Listener = hl
	var ws *apiwire.Server
	if !cfg.NoWire {
		served, ws = listenWire(hl, srv, limit, httpLimits(cfg), cfg.Limits, logger(cfg.Logger))
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(served) }()
	if ready != nil {
		ready(node.PeerAddr(), cfg.HTTPAddr)
	}
	select {
	case <-ctx.Done():
	case err = <-errc:
	case <-node.Done():
		err = errors.New("server: the node stopped (storage failure; see the log)")
	}
	log := logger(cfg.Logger)
	log.Debug("trace: stopping")
	if ctx.Err() != nil && cfg.HandOverMax > 0 {
		// Writes wait for the transfer; then requests still arriving
		// learn the new leader at once (and idle connections close) while
		// the server shuts down.
		drain.begin()
		drain.end(srv, handOver(node, cfg, drain))
	}
	shutdownStart := time.Now()
	if ws != nil {
		// Idle wire connections close now, the others as their requests
		// end: the writes and reads in flight get streamGrace, as over
		// HTTP, before the API's base context ends what is left (streams).
		ws.Drain()
		grace, cancel := context.WithTimeout(context.Background(), streamGrace)
		ws.Wait(grace)
		cancel()
	}
	serr := stoppable.shutdown(2 * time.Second)
	if ws != nil {
		// The base context has ended: the handlers still running on wire
		// connections return, before the node they use is closed.
		bound, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		ws.Wait(bound)
		cancel()
	}
	log.Debug("trace: API shut down", "took", time.Since(shutdownStart), "err", serr)
	if cerr := node.Close(); err == nil {
		err = cerr
	}
	log.Debug("trace: node closed")
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}
