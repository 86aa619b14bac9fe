package apiwire

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"strings"
)

// DirectHandler serves some requests straight from their frames: without
// the http.Request, its URL and header map, that the http.Handler is given
// (issue 21: building them, and the mux's match, were a fifth of the
// leader's CPU per write under the watch load). The requests it takes
// must be answered as the http.Handler would answer them, byte for byte;
// it exists for cost only.
//
// Its methods are called concurrently, from every connection's reader and
// workers.
type DirectHandler interface {
	// Accepts reports whether ServeDirect may serve a request of method
	// to target (path and query, as sent; DecodeRequest's checks passed).
	// It runs on the connection's reader, so it must be quick, and it
	// must accept only a target that url.ParseRequestURI takes: one it
	// refuses closes the connection when it goes through the http.Handler.
	Accepts(method, target string) bool
	// ServeDirect serves r, writing its answer to w, and reports true; or
	// does nothing at all (writes nothing, has no effect) and reports
	// false, and r goes to the http.Handler as any other request.
	ServeDirect(w http.ResponseWriter, r *DirectRequest) bool
}

// directHeadersMax bounds the headers of a request served directly: its
// header spans are kept in the request, in a fixed array. One with more
// goes to the http.Handler.
const directHeadersMax = 8

// DirectRequest is a request frame as a DirectHandler gets it: decoded,
// its headers looked up in the frame rather than copied into a map.
//
// A DirectRequest is used by the worker serving it only, and not after
// ServeDirect returns.
type DirectRequest struct {
	// Method and Target are the frame's (Target: path and query, as sent).
	Method, Target string
	// Body is a copy of the frame's body, the handler's to keep (empty,
	// not nil, without one).
	Body []byte
	// RemoteAddr and Host are the connection's addresses; TLS its state,
	// nil in plain mode.
	RemoteAddr, Host string
	TLS              *tls.ConnectionState

	ctx        context.Context
	head       string // the frame's method, target and headers: spans index it
	spans      [directHeadersMax]headerSpan
	spansCount int
}

// Context returns the request's context: it ends when the client cancels
// the stream, the connection closes, or the server's base context ends.
func (r *DirectRequest) Context() context.Context { return r.ctx }

// Header returns the first value of the header name, "" if none, as
// http.Header.Get does after the header map's canonicalization.
func (r *DirectRequest) Header(name string) string {
	for _, sp := range r.spans[:r.spansCount] {
		if strings.EqualFold(r.head[sp.nameAt:sp.nameEnd], name) {
			return r.head[sp.valueAt:sp.valueEnd]
		}
	}
	return ""
}

// NewDirectRequest returns the DirectRequest a server would give a
// DirectHandler for a request frame of method, target, the headers of h
// that travel, and body, on ctx (tests and benchmarks of a
// DirectHandler). Errors: a request that cannot be encoded within l, or
// that breaks the format (ErrMalformed), or with more headers than a
// direct request holds.
func NewDirectRequest(ctx context.Context, method, target string, h http.Header, body []byte, l Limits) (*DirectRequest, error) {
	frame, err := appendRequest(nil, 1, method, target, h, body, l)
	if err != nil {
		return nil, err
	}
	var spanArray [directHeadersMax]headerSpan
	d, spans, err := decodeRequest(frame[frameHeaderBytes:], spanArray[:0], l)
	if err != nil {
		return nil, err
	}
	if len(spans) > directHeadersMax {
		return nil, fmt.Errorf("apiwire: %d headers, more than the %d of a direct request", len(spans), directHeadersMax)
	}
	r := &DirectRequest{Method: d.method, Target: d.target, Body: append([]byte{}, d.body...), ctx: ctx, head: d.head, spansCount: len(spans)}
	copy(r.spans[:], spans)
	return r, nil
}
