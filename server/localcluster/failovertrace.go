package localcluster

import (
	"crypto/tls"
	"net/http"
	"net/http/httptrace"
	"slices"
	"sync"
	"time"

	"coord/api"
)

// FailoverAttempt is one HTTP attempt of the bench's writer (a write sent
// to one node), in Unix nanoseconds of this machine's clock: with the
// nodes' election trace (--node-log-level debug) it says where a gap's
// last milliseconds went (a refusal naming the new leader, the retry, the
// write on the new leader).
type FailoverAttempt struct {
	Host  string `json:"host"`
	Start int64  `json:"start_unix_ns"`
	End   int64  `json:"end_unix_ns"`
	// Status is the HTTP status (0: no answer; Err says why); Leader the
	// Coord-Leader header of the answer.
	Status int    `json:"status"`
	Leader string `json:"leader,omitempty"`
	Err    string `json:"err,omitempty"`
	// Reused says the attempt went out on a connection made before it
	// (no dial, no TLS handshake).
	Reused bool `json:"reused"`
}

// attemptLog is an http.RoundTripper that records the writes (PUT, POST,
// DELETE) it sends through next. It is safe for concurrent use.
type attemptLog struct {
	next http.RoundTripper
	mu   sync.Mutex
	all  []FailoverAttempt // in the order they ended
}

func (a *attemptLog) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		return a.next.RoundTrip(r)
	}
	at := FailoverAttempt{Host: r.URL.Host, Start: time.Now().UnixNano()}
	trace := &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) { at.Reused = info.Reused }}
	resp, err := a.next.RoundTrip(r.WithContext(httptrace.WithClientTrace(r.Context(), trace)))
	at.End = time.Now().UnixNano()
	if err != nil {
		at.Err = err.Error()
	} else {
		at.Status, at.Leader = resp.StatusCode, resp.Header.Get(api.HeaderLeader)
	}
	a.mu.Lock()
	a.all = append(a.all, at)
	a.mu.Unlock()
	return resp, err
}

// between returns the attempts that ended in [from, to].
func (a *attemptLog) between(from, to int64) []FailoverAttempt {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.DeleteFunc(slices.Clone(a.all), func(at FailoverAttempt) bool { return at.End < from || at.End > to })
}

// recordingHTTPClient returns the HTTP client the client package would
// make for itself (client.New), its writes recorded in log.
func recordingHTTPClient(tlsConfig *tls.Config, attemptTimeout time.Duration, log *attemptLog) *http.Client {
	log.next = &http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: 30 * time.Second,
		TLSClientConfig: tlsConfig, TLSHandshakeTimeout: attemptTimeout}
	return &http.Client{Transport: log}
}
