package apiwire

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
)

// FuzzDirectRequest feeds a request frame's payload to the decoding of a
// request served directly (decodeRequest, DirectRequest.Header): it
// returns errors wrapping ErrMalformed, never panics, and agrees with
// DecodeRequest, the http.Handler's, on the method, target, body and every
// header's first value, whatever the case the name is asked in.
func FuzzDirectRequest(f *testing.F) {
	seed := func(method, target string, h http.Header, body string) []byte {
		b, err := appendRequest(nil, 1, method, target, h, []byte(body), fuzzLimits)
		if err != nil {
			f.Fatal(err)
		}
		return payloadOf(b)
	}
	valid := seed("PUT", "/v1/kv/a?x=1", http.Header{"Authorization": {"Bearer t", "Bearer u"}, "Coord-Forwarded": {"2"}}, "value")
	f.Add(valid)
	f.Add(seed("GET", "/v1/kv/a%2Fb", nil, ""))
	f.Add(valid[:len(valid)-7])
	for _, at := range []int{0, 5, 8, 20} {
		b := bytes.Clone(valid)
		b[at] ^= 0x20 // case flips among them
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, payload []byte) {
		var spanArray [directHeadersMax]headerSpan
		d, spans, err := decodeRequest(payload, spanArray[:0], fuzzLimits)
		rf, rerr := DecodeRequest(payload, fuzzLimits)
		if (err == nil) != (rerr == nil) {
			t.Fatalf("decodeRequest: %v; DecodeRequest: %v", err, rerr)
		}
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		if len(spans) > directHeadersMax {
			return // served through the http.Handler (open)
		}
		r := &DirectRequest{Method: d.method, Target: d.target, Body: d.body, head: d.head, spansCount: len(spans)}
		copy(r.spans[:], spans)
		if r.Method != rf.Method || r.Target != rf.Target || !bytes.Equal(r.Body, rf.Body) {
			t.Fatalf("direct %q %q %q; DecodeRequest %q %q %q", r.Method, r.Target, r.Body, rf.Method, rf.Target, rf.Body)
		}
		for name := range rf.Header {
			for _, asked := range []string{name, strings.ToLower(name), strings.ToUpper(name)} {
				if got, want := r.Header(asked), rf.Header.Get(asked); got != want {
					t.Fatalf("Header(%q) = %q; the header map's Get %q", asked, got, want)
				}
			}
		}
		if got := r.Header("Not-Sent"); got != "" && rf.Header.Get("Not-Sent") == "" {
			t.Fatalf("Header of a header not sent: %q", got)
		}
	})
}

// echoDirect serves directly the requests whose target starts with
// /direct/ (answering with the Authorization header it finds, and the
// body), and gives back those starting with /back/.
type echoDirect struct{ served, back atomic.Int64 }

func (e *echoDirect) Accepts(method, target string) bool {
	return strings.HasPrefix(target, "/direct/") || strings.HasPrefix(target, "/back/")
}

func (e *echoDirect) ServeDirect(w http.ResponseWriter, r *DirectRequest) bool {
	if strings.HasPrefix(r.Target, "/back/") {
		e.back.Add(1)
		return false
	}
	e.served.Add(1)
	w.Header().Set("Coord-Auth", r.Header("authorization"))
	w.WriteHeader(201)
	w.Write(r.Body)
	return true
}

// A DirectHandler serves the requests it accepts, with their headers and
// body; one it gives back, and one it does not accept, reach the
// http.Handler whole; over a real loopback connection.
func TestDirectHandlerServesAndGivesBack(t *testing.T) {
	e := &echoDirect{}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("Coord-Auth", r.Header.Get("Authorization"))
		w.WriteHeader(202)
		w.Write(append([]byte(r.URL.Path+" "), body...))
	})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		ServeConn(c, handler, ServerConfig{Direct: e})
	}()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	for i, tc := range []struct {
		target     string
		wantStatus int
		wantBody   string
	}{
		{"/direct/a", 201, "body"},
		{"/back/a", 202, "/back/a body"},
		{"/other", 202, "/other body"},
	} {
		stream := uint32(2*i + 1)
		out, err := appendRequest(nil, stream, "PUT", tc.target, http.Header{"Authorization": {"Bearer x"}}, []byte("body"), DefaultLimits())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write(out); err != nil {
			t.Fatal(err)
		}
		var buf []byte
		var status int
		var h http.Header
		var body []byte
		for done := false; !done; {
			f, next, err := ReadFrame(r, buf, 1<<20)
			buf = next
			if err != nil {
				t.Fatal(err)
			}
			switch f.Type {
			case FrameHead:
				if status, h, err = decodeHead(f.Payload, DefaultLimits()); err != nil {
					t.Fatal(err)
				}
			case FrameData:
				body = append(body, f.Payload...)
			case FrameEnd:
				done = true
			default:
				t.Fatalf("%s: frame %d", tc.target, f.Type)
			}
		}
		if status != tc.wantStatus || string(body) != tc.wantBody || h.Get("Coord-Auth") != "Bearer x" {
			t.Errorf("%s: %d %v %q; want %d %q with the token", tc.target, status, h, body, tc.wantStatus, tc.wantBody)
		}
	}
	if e.served.Load() != 1 || e.back.Load() != 1 {
		t.Errorf("served %d directly, gave back %d; want 1 and 1", e.served.Load(), e.back.Load())
	}
}
