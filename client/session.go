package client

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"coord/api"
)

// sessionLineBytesMax bounds one line of a session stream: its events are
// a few dozen bytes, and a peer that sends more is not a coord leader.
const sessionLineBytesMax = 4 << 10

// LeaseSession is an open lease session stream (docs/API.md, "Lease
// sessions"): the leader frees the lease a grace period after the stream
// closes from this side, and the holder must treat the stream's loss as the
// loss of its lease.
//
// A LeaseSession is read by one goroutine (Next); Close may be called from
// any.
type LeaseSession struct {
	// Opened is the leader's first event: the keep-alive period and the
	// grace.
	Opened api.SessionOpened
	// KeepAlive and Grace are Opened's, as durations.
	KeepAlive, Grace time.Duration

	body   io.ReadCloser
	lines  *bufio.Scanner
	cancel context.CancelFunc
}

// ErrSessionEnded is returned by LeaseSession.Next when the leader ended
// the stream; the SessionEnded's reason is in the message, and the error
// matches ErrLost too when the reason is api.EndLost.
var ErrSessionEnded = errors.New("client: lease session ended by the leader")

// ErrMalformedSession is returned by OpenLeaseSession when a node answered
// with a stream that is not a lease session (a first event that is not
// one, or unsafe timings): asking again would get the same.
var ErrMalformedSession = errors.New("client: malformed lease session")

// OpenLeaseSession opens a session for holder's tenure of name under
// token, on the leader: a follower refuses (unavailable), and the next
// endpoint is tried, as for any request. It returns once the leader's
// first event arrived, or an error: ErrLost if the token is not current or
// not holder's, ErrUnavailable if no leader answered before ctx ended.
// The stream lives until ctx ends or Close.
func (c *Client) OpenLeaseSession(ctx context.Context, name, holder string, token uint64) (*LeaseSession, error) {
	if name == "" || holder == "" || token == 0 {
		return nil, fmt.Errorf("%w: lease session needs a name, a holder and a token", ErrInvalid)
	}
	q := url.Values{api.ParamToken: {strconv.FormatUint(token, 10)}, api.ParamHolder: {holder}}
	path := leasePath(name, "session") + "?" + q.Encode()
	backoff := c.cfg.BackoffMin
	var last error
	for {
		c.mu.Lock()
		start := c.preferred
		c.mu.Unlock()
		n := len(c.cfg.Endpoints)
		for i := range n {
			ep := (start + i) % n
			s, err := c.openSession(ctx, c.cfg.Endpoints[ep], path)
			if err == nil {
				c.mu.Lock()
				c.preferred = ep
				c.mu.Unlock()
				return s, nil
			}
			if !retryable(err) || errors.Is(err, ErrMalformedSession) {
				return nil, err
			}
			// An attempt cut short by ctx's end says less than the one
			// before it.
			if last == nil || ctx.Err() == nil {
				last = err
			}
			if ctx.Err() != nil {
				return nil, fmt.Errorf("%w: open lease session %q: %w (last: %w)", ErrUnavailable, name, ctx.Err(), last)
			}
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: open lease session %q: %w (last: %w)", ErrUnavailable, name, ctx.Err(), last)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, c.cfg.BackoffMax)
	}
}

// openSession tries one endpoint. The attempt timeout bounds the wait for
// the first event, not the stream.
func (c *Client) openSession(ctx context.Context, endpoint, path string) (*LeaseSession, error) {
	base, err := c.cfg.baseURL(endpoint)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	sctx, cancel := context.WithCancel(ctx)
	timer := time.AfterFunc(c.cfg.AttemptTimeout, cancel)
	req, err := http.NewRequestWithContext(sctx, "GET", base+path, nil)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if c.cfg.Token != "" {
		req.Header.Set(api.HeaderAuthorization, api.BearerPrefix+c.cfg.Token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		cancel()
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		defer cancel()
		defer resp.Body.Close()
		return nil, errorFrom(resp)
	}
	s := &LeaseSession{body: resp.Body, cancel: cancel, lines: bufio.NewScanner(resp.Body)}
	s.lines.Buffer(make([]byte, 512), sessionLineBytesMax)
	event, data, err := s.next()
	if err == nil && event != api.EventSession {
		err = fmt.Errorf("%w: %s: first event %q, want %q", ErrMalformedSession, endpoint, event, api.EventSession)
	}
	if err == nil {
		err = s.opened(data)
	}
	if !timer.Stop() || err != nil {
		s.Close()
		if err == nil {
			err = fmt.Errorf("client: %s: lease session: no first event within %v", endpoint, c.cfg.AttemptTimeout)
		}
		return nil, err
	}
	return s, nil
}

// errorFrom reads a non-2xx answer into an *Error.
func errorFrom(resp *http.Response) error {
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	return errorOf(resp.StatusCode, raw)
}

// opened checks the leader's first event: bytes from the network are
// input.
func (s *LeaseSession) opened(data string) error {
	if err := json.Unmarshal([]byte(data), &s.Opened); err != nil {
		return fmt.Errorf("%w: first event: %w", ErrMalformedSession, err)
	}
	// Checked in milliseconds, as sent, before any product: 4 × a
	// keep-alive of 2^62 ns wraps around to a few milliseconds.
	keepAliveMs, graceMs := s.Opened.KeepAliveMs, s.Opened.GraceMs
	if keepAliveMs <= 0 || keepAliveMs > graceMs/4 || graceMs > time.Hour.Milliseconds() {
		return fmt.Errorf("%w: keep-alive %d ms and grace %d ms: want 0 < 4 × keep-alive <= grace <= 1h", ErrMalformedSession,
			keepAliveMs, graceMs)
	}
	s.KeepAlive = time.Duration(keepAliveMs) * time.Millisecond
	s.Grace = time.Duration(graceMs) * time.Millisecond
	return nil
}

// Next waits for the next keep-alive and returns nil, or returns the
// error that ended the stream: ErrSessionEnded (and ErrLost for
// api.EndLost) when the leader ended it, another error when the connection
// failed or closed. Next does not time out: the caller measures the time
// since the last keep-alive.
func (s *LeaseSession) Next() error {
	for {
		event, data, err := s.next()
		switch {
		case err != nil:
			return err
		case event == api.EventKeepAlive:
			return nil
		case event == api.EventEnd:
			var ended api.SessionEnded
			_ = json.Unmarshal([]byte(data), &ended)
			if ended.Reason == api.EndLost {
				return fmt.Errorf("%w: %w: %s", ErrSessionEnded, ErrLost, ended.Reason)
			}
			return fmt.Errorf("%w: %q", ErrSessionEnded, ended.Reason)
		}
		// Unknown events are skipped: a later server may send more.
	}
}

// next reads one server-sent event.
func (s *LeaseSession) next() (event, data string, err error) {
	for s.lines.Scan() {
		line := s.lines.Text()
		switch {
		case line == "" && event != "":
			return event, data, nil
		case strings.HasPrefix(line, "event: "):
			event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			data = strings.TrimPrefix(line, "data: ")
		}
	}
	if err := s.lines.Err(); err != nil {
		return "", "", fmt.Errorf("client: lease session: %w", err)
	}
	return "", "", fmt.Errorf("client: lease session: %w", io.ErrUnexpectedEOF)
}

// Close closes the stream from the holder's side: the leader frees the
// lease after the grace unless another session of the tenure opens.
func (s *LeaseSession) Close() error {
	s.cancel()
	return s.body.Close()
}
