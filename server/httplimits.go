package server

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/pflag"

	"coord/api"
)

// HTTPLimits bound what the clients of one node's HTTP API can hold of it:
// connections, watches, and the time a request may take to arrive. Every
// field must be positive; start from DefaultHTTPLimits.
type HTTPLimits struct {
	// ConnectionsMax bounds the open connections to the API. A connection
	// beyond it is closed as soon as it is accepted, before a byte is
	// read or written (before a TLS handshake), so that clients learn at
	// once rather than wait in the backlog. With the multiplexed
	// connection served (Config.NoWire false) the limit is applied where
	// connections are accepted, before they are sorted into wire and HTTP
	// (apiwire.ListenerConfig.Admit): those still being sorted count too.
	ConnectionsMax int
	// WatchesMax bounds the watches (long polls and event streams, those
	// forwarded from other nodes included) that the node serves at once.
	// One more is answered 503 too_many_watches with Retry-After. Keep it
	// well below ConnectionsMax: every watch holds a connection.
	WatchesMax int
	// ReadHeaderTimeout bounds reading a request's headers, and
	// ReadTimeout the whole request, its body included: a client that
	// sends slowly is cut off. A watch is excepted by design once its
	// request is read (net/http lifts the read deadline then, over HTTP/1
	// and HTTP/2): it waits for a change for up to timeout_ms (a stream,
	// for as long as the client stays), and only WatchesMax bounds how
	// many do. There is no write timeout, which would cut watches off.
	ReadHeaderTimeout, ReadTimeout time.Duration
	// IdleTimeout closes a keep-alive connection that carries no request
	// for this long.
	IdleTimeout time.Duration
}

// DefaultHTTPLimits returns coord's limits: 4,096 connections, 1,024
// watches, 10 s for the headers, 30 s for a whole request, 2 min idle.
func DefaultHTTPLimits() HTTPLimits {
	return HTTPLimits{
		ConnectionsMax:    4096,
		WatchesMax:        1024,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		IdleTimeout:       2 * time.Minute,
	}
}

// Validate reports every field that is not positive, wrapping ErrInvalid.
func (l HTTPLimits) Validate() error {
	var errs []error
	for _, f := range []struct {
		name  string
		value int64
	}{
		{"ConnectionsMax", int64(l.ConnectionsMax)},
		{"WatchesMax", int64(l.WatchesMax)},
		{"ReadHeaderTimeout", int64(l.ReadHeaderTimeout)},
		{"ReadTimeout", int64(l.ReadTimeout)},
		{"IdleTimeout", int64(l.IdleTimeout)},
	} {
		if f.value <= 0 {
			errs = append(errs, fmt.Errorf("HTTPLimits.%s must be positive", f.name))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrInvalid, errors.Join(errs...))
	}
	return nil
}

// Register defines the flags of HTTPLimits on fs, with l's values as
// their defaults.
func (l *HTTPLimits) Register(fs *pflag.FlagSet) {
	fs.IntVar(&l.ConnectionsMax, "http-max-connections", l.ConnectionsMax, "connections the HTTP API keeps open at once; more are closed when accepted")
	fs.IntVar(&l.WatchesMax, "http-max-watches", l.WatchesMax, "watches (long polls and streams) served at once; more are answered 503 with Retry-After")
	fs.DurationVar(&l.ReadHeaderTimeout, "http-read-header-timeout", l.ReadHeaderTimeout, "time a client has to send a request's headers")
	fs.DurationVar(&l.ReadTimeout, "http-read-timeout", l.ReadTimeout, "time a client has to send a whole request, body included (watches wait longer by design)")
	fs.DurationVar(&l.IdleTimeout, "http-idle-timeout", l.IdleTimeout, "time a keep-alive connection may stay idle")
}

// newHTTPServer returns the http.Server of a node's API, with the limits
// set: timeouts, and the connection limit enforced by a ConnState hook
// (so that it holds for whatever listener the server is given).
func newHTTPServer(h http.Handler, l HTTPLimits, logger *slog.Logger, metrics *Metrics) *http.Server {
	srv, _ := newLimitedHTTPServer(h, l, logger, metrics)
	return srv
}

// newLimitedHTTPServer is newHTTPServer, and returns its connection
// limit too, for the listener that sorts wire from HTTP (listenWire).
func newLimitedHTTPServer(h http.Handler, l HTTPLimits, logger *slog.Logger, metrics *Metrics) (*http.Server, *connLimit) {
	cl := &connLimit{max: int64(l.ConnectionsMax), logger: logger, metrics: metrics, burst: newBurst()}
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: l.ReadHeaderTimeout,
		ReadTimeout:       l.ReadTimeout,
		IdleTimeout:       l.IdleTimeout,
		ConnState:         cl.track,
	}, cl
}

// connLimit counts a server's open connections and closes new ones beyond
// max. The end of a burst of connections frees memory (see burst): a
// connection holds more than the watch it carried, and closes after it.
//
// A connection is counted from the http.Server's StateNew (track), which
// comes right after its accept, or, behind a listener that sorts wire from
// HTTP, from that listener's accept (admit; track then counts only the
// connection's end), until it closes.
//
// connLimit is safe for concurrent use: the server calls track from its
// accept loop and from each connection's goroutine.
type connLimit struct {
	max     int64
	open    atomic.Int64
	logger  *slog.Logger
	metrics *Metrics
	warned  rateLimit
	burst   burst
	// atAccept is set once admit counts the connections where they are
	// accepted (listenWire), before the http.Server is given them.
	atAccept atomic.Bool
}

func (c *connLimit) track(conn net.Conn, state http.ConnState) {
	switch state {
	case http.StateNew:
		if !c.atAccept.Load() && !c.take(conn) {
			conn.Close() // the server sees StateClosed next, which counts it out
		}
	case http.StateClosed, http.StateHijacked:
		c.release()
	}
}

// admit counts conn in, or reports false, counting nothing, if the limit
// is reached: the caller closes it.
func (c *connLimit) admit(conn net.Conn) bool {
	if c.take(conn) {
		return true
	}
	c.release()
	return false
}

// take counts conn in and reports whether it is within the limit; one
// over it stays counted until release.
func (c *connLimit) take(conn net.Conn) bool {
	n := c.open.Add(1)
	c.metrics.connectionAccepted()
	c.metrics.addConnections(1)
	c.burst.rose(n)
	if n <= c.max {
		return true
	}
	c.metrics.connectionRejected()
	if c.warned.allow(time.Now()) {
		c.logger.Warn("HTTP connection limit reached: closing new connections", "limit", c.max, "remote", conn.RemoteAddr().String())
	}
	return false
}

// release counts a connection out.
func (c *connLimit) release() {
	n := c.open.Add(-1)
	c.metrics.addConnections(-1)
	c.burst.fell(n)
}

// rateLimit lets one event through per second, for log lines that an
// attacker could otherwise multiply.
type rateLimit struct{ last atomic.Int64 }

func (r *rateLimit) allow(now time.Time) bool {
	last := r.last.Load()
	return now.UnixNano()-last >= int64(time.Second) && r.last.CompareAndSwap(last, now.UnixNano())
}

// watchLimit admits at most max watches at once.
//
// watchLimit is safe for concurrent use.
type watchLimit struct {
	max     int64
	active  atomic.Int64
	metrics *Metrics
	burst   burst
}

func newWatchLimit(max int, metrics *Metrics) *watchLimit {
	return &watchLimit{max: int64(max), metrics: metrics, burst: newBurst()}
}

// acquire reserves a watch, or reports false at the limit. A reserved watch
// must be released.
func (l *watchLimit) acquire() bool {
	n := l.active.Add(1)
	if n > l.max {
		l.active.Add(-1)
		l.metrics.watchRejected()
		return false
	}
	l.metrics.addWatches(1)
	l.burst.rose(n)
	return true
}

// release ends a watch.
func (l *watchLimit) release() {
	n := l.active.Add(-1)
	l.metrics.addWatches(-1)
	l.burst.fell(n)
}

// burst follows a count of things that hold memory (watches, connections)
// and hands memory back to the operating system (returnMemory) when
// a burst of them has ended: when at most an eighth of its peak is left.
// Otherwise the Go runtime keeps the freed heap until its next collection,
// which an idle node may not run for two minutes, and returns it gradually
// after that: resident memory stays near the burst's peak (the outsider's
// 10,000 watches left 280-560 MB behind).
//
// burst is safe for concurrent use.
type burst struct {
	mu       sync.Mutex
	peak     int64     // the highest count since memory was last freed
	freeing  bool      // a free is pending or running
	lastFree time.Time // when the last free ended

	free      func()        // returnMemory; a test may count calls instead
	freeEvery time.Duration // the least time between two frees
}

// freeEveryDefault spaces frees out: a count that swings past burstMin
// many times a second costs a forced collection every 10 s at most.
const freeEveryDefault = 10 * time.Second

func newBurst() burst { return burst{free: returnMemory, freeEvery: freeEveryDefault} }

// returnMemory collects garbage and hands the free heap back to the
// operating system. It collects twice: net/http keeps a closed connection's
// buffers in a sync.Pool, which one collection only moves to the pool's
// victim cache, and the next frees.
func returnMemory() {
	runtime.GC()
	debug.FreeOSMemory()
}

// burstMin is the smallest peak whose end frees memory: a node that only
// ever holds a few hundred watches or connections never pays for a forced
// collection.
const burstMin = 256

// rose records that the count is now n.
func (b *burst) rose(n int64) {
	b.mu.Lock()
	b.peak = max(b.peak, n)
	b.mu.Unlock()
}

// fell records that the count is now n, and frees memory if that ends a
// burst.
func (b *burst) fell(n int64) {
	b.mu.Lock()
	ended := b.peak >= burstMin && n <= b.peak/8 && !b.freeing
	var wait time.Duration
	if ended {
		b.peak, b.freeing = n, true
		wait = time.Until(b.lastFree.Add(b.freeEvery))
	}
	b.mu.Unlock()
	if !ended {
		return
	}
	// On a goroutine of its own: the caller (a handler that has written its
	// answer, the server's connection bookkeeping) need not wait for a full
	// collection, nor for the last one to be freeEvery old.
	go func() {
		if wait > 0 {
			time.Sleep(wait)
		}
		b.free()
		b.mu.Lock()
		b.freeing, b.lastFree = false, time.Now()
		b.mu.Unlock()
	}()
}

// admitWatch reserves one of the node's watches for this request, or
// answers 503 too_many_watches with Retry-After at the limit.
func (a *API) admitWatch(w http.ResponseWriter) (release func(), err error) {
	if !a.watches.acquire() {
		return nil, fail(api.CodeTooManyWatches, fmt.Sprintf("node serves its maximum of %d watches at once; retry later", a.watches.max))
	}
	return a.watches.release, nil
}

// newServeHTTP returns the http.Server that Serve runs for node: its API
// under cfg.HTTP's limits, and its connection limit. It also starts
// keeping the forwarding client's connection to the leader warm
// (forwardwarm.go) until the node stops.
func newServeHTTP(node *Node, cfg Config) (*http.Server, *connLimit) {
	limits := httpLimits(cfg)
	logger := cfg.Logger
	if logger == nil {
		logger = slog.Default()
	}
	apiCfg := APIConfig{Limits: cfg.Limits, Logger: logger, Metrics: cfg.Metrics, WatchesMax: limits.WatchesMax, Pprof: cfg.Pprof,
		SessionGrace: cfg.LeaseSessionGrace}
	apiSecurity(&apiCfg, cfg.Security)
	go node.warmForwarding(apiCfg.Client, apiCfg.ForwardScheme)
	srv, limit := newLimitedHTTPServer(NewAPI(node, apiCfg), limits, logger, cfg.Metrics)
	srv.Protocols = apiProtocols(cfg.HTTP2)
	return srv, limit
}

// apiProtocols returns the protocols the API's http.Server speaks:
// HTTP/1.1, and with http2 HTTP/2 both over TLS (the connections whose
// ALPN chose "h2": offerHTTP2) and in clear (h2c, to clients that open
// with HTTP/2's preface; one port serves both). Without http2 a client
// that offers only HTTP/2 is refused, as before.
func apiProtocols(http2 bool) *http.Protocols {
	p := new(http.Protocols)
	p.SetHTTP1(true)
	p.SetHTTP2(http2)
	p.SetUnencryptedHTTP2(http2)
	return p
}
