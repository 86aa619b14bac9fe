package client

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"math/big"
	"testing"
	"time"

	"coord/api"
)

// sessionOf returns a LeaseSession reading the stream body, as
// openSession makes it.
func sessionOf(body []byte) *LeaseSession {
	s := &LeaseSession{body: io.NopCloser(bytes.NewReader(body)), cancel: func() {}, lines: bufio.NewScanner(bytes.NewReader(body))}
	s.lines.Buffer(make([]byte, 512), sessionLineBytesMax)
	return s
}

// sessionEventsMax bounds the events a fuzz input is read for.
const sessionEventsMax = 64

// FuzzLeaseSession feeds arbitrary bytes, as a lease session's stream from
// the leader, to the client's reader of it (the first event, then Next):
// it never panics, a first event it accepts has a keep-alive and a grace
// that satisfy 0 < 4 × keep-alive <= grace <= 1 h (checked here in exact
// arithmetic, on the milliseconds the leader sent), and the stream ends
// with an error (the input runs out).
func FuzzLeaseSession(f *testing.F) {
	opened := func(keepAliveMs, graceMs int64) string {
		b, _ := json.Marshal(api.SessionOpened{Name: "leader", Token: 3, KeepAliveMs: keepAliveMs, GraceMs: graceMs})
		return "event: " + api.EventSession + "\ndata: " + string(b) + "\n\n"
	}
	keepAlive := "event: " + api.EventKeepAlive + "\ndata: {}\n\n"
	end := "event: " + api.EventEnd + "\ndata: {\"reason\":\"" + api.EndLost + "\"}\n\n"
	f.Add([]byte(opened(1000, 10000) + keepAlive + keepAlive + end))
	f.Add([]byte(opened(1000, 10000) + "event: later\ndata: x\n\n" + keepAlive))
	f.Add([]byte(opened(1000, 3999)))                        // grace too short
	f.Add([]byte(opened(0, 10000)))                          // no keep-alive
	f.Add([]byte(opened(1000, 10000)[:30]))                  // cut short
	f.Add([]byte(keepAlive))                                 // no first event
	f.Add([]byte("event: session\ndata: {\"keep_alive\n\n")) // bad JSON
	f.Fuzz(func(t *testing.T, body []byte) {
		s := sessionOf(body)
		event, data, err := s.next()
		if err != nil || event != api.EventSession {
			return
		}
		if err := s.opened(data); err != nil {
			if !errors.Is(err, ErrMalformedSession) {
				t.Fatalf("error %v does not wrap ErrMalformedSession", err)
			}
			return
		}
		keepAlive, grace := big.NewInt(s.Opened.KeepAliveMs), big.NewInt(s.Opened.GraceMs)
		four := new(big.Int).Mul(big.NewInt(4), keepAlive)
		if keepAlive.Sign() <= 0 || four.Cmp(grace) > 0 || grace.Cmp(big.NewInt(time.Hour.Milliseconds())) > 0 {
			t.Fatalf("accepted keep-alive %d ms and grace %d ms (as durations %v and %v)",
				s.Opened.KeepAliveMs, s.Opened.GraceMs, s.KeepAlive, s.Grace)
		}
		if s.KeepAlive != time.Duration(s.Opened.KeepAliveMs)*time.Millisecond || s.Grace != time.Duration(s.Opened.GraceMs)*time.Millisecond {
			t.Fatalf("keep-alive %v and grace %v from %d and %d ms", s.KeepAlive, s.Grace, s.Opened.KeepAliveMs, s.Opened.GraceMs)
		}
		for range sessionEventsMax {
			if err := s.Next(); err != nil {
				return
			}
		}
	})
}

// FuzzAnswer feeds arbitrary bytes, as the body of a server's answer, to
// the client's decoders of a key, a lease and an error: never a panic,
// and a key's value round-trips through the answer's encoding (base64
// when value_base64 is set).
func FuzzAnswer(f *testing.F) {
	for _, v := range []any{
		api.KeyResponse{Key: "k", Value: "v", Revision: 3, CreateRevision: 2, Version: 2},
		api.KeyResponse{Key: "k", ValueBase64: base64.StdEncoding.EncodeToString([]byte{0xff, 0}), Revision: 3},
		api.LeaseResponse{Name: "l", Holder: "h", Token: 4, TTLMs: 2000, Revision: 9},
		api.ErrorResponse{Error: "conflict", Code: api.CodeConflict, Key: "k"},
	} {
		b, _ := json.Marshal(v)
		f.Add(b)
	}
	f.Add([]byte(`{"value_base64":"not base64!"}`))
	f.Add([]byte("plain text, not JSON"))
	f.Fuzz(func(t *testing.T, raw []byte) {
		if e := errorOf(409, raw); e == nil || e.Status != 409 {
			t.Fatalf("errorOf: %+v", e)
		}
		var l api.LeaseResponse
		if json.Unmarshal(raw, &l) == nil {
			leaseFrom(l)
		}
		var r api.KeyResponse
		if json.Unmarshal(raw, &r) != nil {
			return
		}
		var kv KeyValue
		if err := kv.from(r); err != nil {
			return
		}
		if r.ValueBase64 != "" {
			if again := base64.StdEncoding.EncodeToString(kv.Value); again != r.ValueBase64 {
				// Padding bits that are not zero decode, and encode
				// otherwise: compare what they decode to.
				back, err := base64.StdEncoding.DecodeString(again)
				if err != nil || !bytes.Equal(back, kv.Value) {
					t.Fatalf("value %x re-encodes to %q (%v)", kv.Value, again, err)
				}
			}
		} else if string(kv.Value) != r.Value {
			t.Fatalf("value %q from %q", kv.Value, r.Value)
		}
	})
}
