package server

import (
	"crypto/tls"
	"log/slog"
	"net"
	"net/http"

	"coord/apiwire"
)

// listenWire serves the API over coord's multiplexed connection (package
// apiwire) on the API's own listener hl, beside HTTP: it returns the
// listener the http.Server serves (the connections that do not speak
// wire) and the wire server, which Serve drains when it stops. Plain
// connections speak wire when they open with apiwire.Preface, TLS ones when
// ALPN chose apiwire.ALPN (offerWire). Requests go through srv's handler,
// the same mux, tokens and forwarding as over HTTP, with srv's base
// context, and close after the idle timeout. The HTTP connection limit
// (limit, srv's own) counts every connection from its accept, before it
// is sorted (no TLS handshake, no read for one over the limit), until it
// closes, whichever protocol it speaks.
func listenWire(hl net.Listener, srv *http.Server, limit *connLimit, limits HTTPLimits, apiLimits Limits, logger *slog.Logger) (net.Listener, *apiwire.Server) {
	wl := wireLimits(apiLimits)
	ws := apiwire.NewServer(srv.Handler, apiwire.ServerConfig{Limits: wl, IdleTimeout: limits.IdleTimeout, Logger: logger,
		BaseContext: srv.BaseContext(hl), FrameTimeout: limits.ReadHeaderTimeout, WriteTimeout: StreamWriteTimeoutDefault})
	limit.atAccept.Store(true) // before the http.Server is given a connection
	l := apiwire.NewListener(hl, apiwire.ListenerConfig{SortTimeout: limits.ReadHeaderTimeout,
		Admit: limit.admit, Release: func(net.Conn) { limit.release() }}, func(c net.Conn) {
		limit.metrics.wireConnection()
		defer limit.release()
		ws.ServeConn(c)
	})
	return l, ws
}

// wireLimits returns the wire limits of an API with apiLimits: a frame
// holds the largest body the API takes (a batch) with its headers, and at
// least the 4 MiB a wire client sends, so that an oversized body reaches
// the API and gets its clear 413 rather than a closed connection.
func wireLimits(apiLimits Limits) apiwire.Limits {
	if apiLimits == (Limits{}) {
		apiLimits = DefaultLimits()
	}
	l := apiwire.DefaultLimits()
	body := max(bodyBytesMax("kv_batch", apiLimits), bodyBytesMax("kv", apiLimits), int64(apiwire.DefaultLimits().FrameBytesMax))
	l.FrameBytesMax = int(body) + l.HeaderBytesMax
	return l
}

// offerWire makes c, a configuration whose GetConfigForClient returns the
// one each handshake uses (pki.ServerConfig, after offerHTTP2), also
// agree to apiwire.ALPN, first: the server's order decides in Go's TLS,
// and a client that offers wire and HTTP (coord's client, which falls
// back to HTTP with a node that does not speak wire) gets wire. A client
// that does not offer it (curl, a browser) gets HTTP as before.
func offerWire(c *tls.Config) *tls.Config {
	inner := c.GetConfigForClient
	c.GetConfigForClient = func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
		hc, err := inner(hello)
		if hc != nil {
			hc.NextProtos = append([]string{apiwire.ALPN}, hc.NextProtos...)
		}
		return hc, err
	}
	return c
}

// httpLimits returns cfg.HTTP, DefaultHTTPLimits if zero (as
// newServeHTTP).
func httpLimits(cfg Config) HTTPLimits {
	if cfg.HTTP == (HTTPLimits{}) {
		return DefaultHTTPLimits()
	}
	return cfg.HTTP
}
