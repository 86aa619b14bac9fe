package apiwire

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// serve starts a plain listener on loopback that serves h over wire and
// over HTTP/1.1 on the same port, and returns its address.
func serve(t *testing.T, h http.Handler, cfg ServerConfig) (string, *Server) {
	t.Helper()
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Logger == nil {
		cfg.Logger = quiet
	}
	ws := NewServer(h, cfg)
	l := NewListener(inner, ListenerConfig{SortTimeout: 10 * time.Second}, func(c net.Conn) { ws.ServeConn(c) })
	srv := &http.Server{Handler: h}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close(); ws.Drain() })
	return l.Addr().String(), ws
}

func client(t *testing.T) *http.Client {
	tr := NewTransport(TransportConfig{})
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// echo answers with the method, path, query, body and a few headers.
var echo = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	w.Header().Set("Coord-Node", "7")
	w.Header().Set("X-Dropped", "never sent")
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, "%s %s %s auth=%q body=%q", r.Method, r.URL.Path, r.URL.RawQuery, r.Header.Get("Authorization"), body)
})

func TestRoundTrip(t *testing.T) {
	addr, _ := serve(t, echo, ServerConfig{})
	hc := client(t)
	req, _ := http.NewRequest("PUT", "http://"+addr+"/v1/kv/a?prev=1", strings.NewReader("value"))
	req.Header.Set("Authorization", "Bearer x")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 201 || resp.Header.Get("Coord-Node") != "7" || resp.Header.Get("X-Dropped") != "" || resp.Proto != "COORD-WIRE/1" {
		t.Fatalf("status %d proto %s headers %v", resp.StatusCode, resp.Proto, resp.Header)
	}
	if want := `PUT /v1/kv/a prev=1 auth="Bearer x" body="value"`; string(b) != want {
		t.Fatalf("body %q, want %q", b, want)
	}
	// The same port still serves HTTP/1.1.
	resp, err = http.Get("http://" + addr + "/plain")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.Proto != "HTTP/1.1" || resp.StatusCode != 201 {
		t.Fatalf("HTTP on the same port: %s %d", resp.Proto, resp.StatusCode)
	}
}

// TestShortAnswerWholeBeforeTheCallerWaits: an answer whose head and end
// have both arrived before RoundTrip waits for them is the answer, not an
// EOF (both are ready then, and a select picks either).
func TestShortAnswerWholeBeforeTheCallerWaits(t *testing.T) {
	addr, _ := serve(t, echo, ServerConfig{})
	hc := client(t)
	testHookOpened = func(done <-chan struct{}) { <-done }
	defer func() { testHookOpened = nil }()
	for i := range 50 {
		resp, err := hc.Get("http://" + addr + "/short")
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 201 || !strings.HasPrefix(string(b), "GET /short") {
			t.Fatalf("request %d: %d %q", i, resp.StatusCode, b)
		}
	}
}

// Many requests in flight at once share one connection and each gets its
// own answer.
func TestConcurrentRequestsShareAConnection(t *testing.T) {
	var mu sync.Mutex
	remotes := map[string]bool{}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		remotes[r.RemoteAddr] = true
		mu.Unlock()
		io.Copy(w, r.Body)
	})
	addr, _ := serve(t, h, ServerConfig{})
	hc := client(t)
	var wg sync.WaitGroup
	errs := make(chan error, 200)
	for i := range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			want := fmt.Sprintf("request %d", i)
			resp, err := hc.Post("http://"+addr+"/", "text/plain", strings.NewReader(want))
			if err != nil {
				errs <- err
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if string(b) != want {
				errs <- fmt.Errorf("got %q, want %q", b, want)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if len(remotes) != 1 {
		t.Fatalf("requests came over %d connections, want 1", len(remotes))
	}
}

// A streaming answer arrives piece by piece, each as it is flushed.
func TestStreamingAnswer(t *testing.T) {
	next := make(chan string)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.(http.Flusher).Flush()
		for s := range next {
			io.WriteString(w, s)
			w.(http.Flusher).Flush()
		}
	})
	addr, _ := serve(t, h, ServerConfig{})
	resp, err := client(t).Get("http://" + addr + "/watch")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	buf := make([]byte, 64)
	for _, s := range []string{"one\n", "two\n"} {
		next <- s
		n, err := resp.Body.Read(buf)
		if err != nil || string(buf[:n]) != s {
			t.Fatalf("read %q, %v; want %q", buf[:n], err, s)
		}
	}
	close(next)
	if _, err := io.ReadAll(resp.Body); err != nil {
		t.Fatalf("end of the stream: %v", err)
	}
}

// A request whose context ends is cancelled on the server.
func TestCancelReachesTheHandler(t *testing.T) {
	ended := make(chan error, 1)
	started := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/block" {
			close(started)
			<-r.Context().Done()
			ended <- r.Context().Err()
			return
		}
		io.WriteString(w, "ok")
	})
	addr, _ := serve(t, h, ServerConfig{})
	hc := client(t)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-started; cancel() }()
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+addr+"/block", nil)
	if _, err := hc.Do(req); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled request: %v, want context.Canceled", err)
	}
	if err := <-ended; !errors.Is(err, context.Canceled) {
		t.Fatalf("handler's context: %v", err)
	}
	// The connection carries on.
	resp, err := hc.Get("http://" + addr + "/next")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
}

// A connection killed mid-request fails the requests on it, not others,
// and the next request dials again.
func TestKilledConnectionFailsOnlyItsRequests(t *testing.T) {
	started := make(chan struct{}, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/block" {
			started <- struct{}{}
			<-r.Context().Done()
			return
		}
		io.WriteString(w, "ok")
	})
	addrA, _ := serve(t, h, ServerConfig{})
	addrB, _ := serve(t, h, ServerConfig{})
	tr := NewTransport(TransportConfig{})
	hc := &http.Client{Transport: tr}
	// A request to B in flight while A's connection dies.
	errB := make(chan error, 1)
	go func() {
		resp, err := hc.Get("http://" + addrB + "/block")
		if err == nil {
			resp.Body.Close()
		}
		errB <- err
	}()
	<-started
	errA := make(chan error, 1)
	go func() {
		_, err := hc.Get("http://" + addrA + "/block")
		errA <- err
	}()
	<-started
	tr.mu.Lock()
	tr.conns["http://"+addrA].conn.Close() // as a reset would
	tr.mu.Unlock()
	err := <-errA
	var op *net.OpError
	if err == nil || (errors.As(err, &op) && op.Op == "dial") {
		t.Fatalf("request on the killed connection: %v, want a connection error that is not a dial error", err)
	}
	select {
	case err := <-errB:
		t.Fatalf("the request on the other connection ended too: %v", err)
	default:
	}
	resp, err := hc.Get("http://" + addrA + "/again")
	if err != nil {
		t.Fatalf("after the connection died: %v", err)
	}
	resp.Body.Close()
	tr.CloseIdleConnections()
}

// rawConn dials addr, sends the preface, and returns the connection and a
// reader of frames.
func rawConn(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := io.WriteString(c, Preface); err != nil {
		t.Fatal(err)
	}
	return c, bufio.NewReader(c)
}

func request(t *testing.T, stream uint32, path string, body []byte) []byte {
	t.Helper()
	b, err := appendRequest(nil, stream, "GET", path, nil, body, Limits{FrameBytesMax: 1 << 30, StreamsMax: 1, HeadersMax: 32, HeaderBytesMax: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Malformed and oversized frames close their connection with an error;
// the server keeps serving the others.
func TestBadFramesCloseTheirConnection(t *testing.T) {
	limits := DefaultLimits()
	limits.FrameBytesMax = 1 << 10
	var logged bytes.Buffer
	var logMu sync.Mutex
	logger := slog.New(slog.NewTextHandler(lockedWriter{&logMu, &logged}, nil))
	addr, _ := serve(t, echo, ServerConfig{Limits: limits, Logger: logger})
	cases := map[string][]byte{
		"oversized":          appendFrameHeader(nil, FrameRequest, 1, 1<<20),
		"unknown type":       appendFrame(nil, 9, 1, nil),
		"even stream":        request(t, 2, "/", nil),
		"bad target":         request(t, 1, "no-slash", nil),
		"head from a client": appendFrame(nil, FrameHead, 1, []byte{0, 200, 0}),
		"truncated headers":  append(appendFrameHeader(nil, FrameRequest, 1, 6), 3, 'G', 'E', 'T', 0, 1),
		"reused stream":      append(request(t, 1, "/", nil), request(t, 1, "/", nil)...),
	}
	for name, frames := range cases {
		t.Run(name, func(t *testing.T) {
			c, r := rawConn(t, addr)
			if _, err := c.Write(frames); err != nil {
				t.Fatal(err)
			}
			// Whatever answers came first, the connection ends.
			var buf []byte
			var err error
			for err == nil {
				_, buf, err = ReadFrame(r, buf, 1<<20)
			}
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && !strings.Contains(err.Error(), "reset") {
				t.Fatalf("after %s: %v, want the connection closed", name, err)
			}
		})
	}
	logMu.Lock()
	// Logged, at most a line a second (logLimit): at least the first.
	if n := strings.Count(logged.String(), "closing a connection"); n < 1 || n > len(cases) {
		t.Errorf("logged %d malformed connections, want 1 to %d:\n%s", n, len(cases), logged.String())
	}
	logMu.Unlock()
	resp, err := client(t).Get("http://" + addr + "/still")
	if err != nil {
		t.Fatalf("the server stopped serving: %v", err)
	}
	resp.Body.Close()
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// A request beyond StreamsMax is refused on its own stream; the others
// are served.
func TestTooManyStreamsRefusesTheExtraOne(t *testing.T) {
	release := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/block" {
			<-release
		}
		io.WriteString(w, "ok")
	})
	limits := DefaultLimits()
	limits.StreamsMax = 2
	addr, _ := serve(t, h, ServerConfig{Limits: limits})
	c, r := rawConn(t, addr)
	var frames []byte
	for _, id := range []uint32{1, 3, 5} {
		frames = append(frames, request(t, id, "/block", nil)...)
	}
	if _, err := c.Write(frames); err != nil {
		t.Fatal(err)
	}
	f, _, err := ReadFrame(r, nil, 1<<20)
	if err != nil || f.Type != FrameRefuse || f.Stream != 5 || !strings.Contains(string(f.Payload), "too many streams") {
		t.Fatalf("first frame %+v (%s), %v; want stream 5 refused", f, f.Payload, err)
	}
	close(release)
	ended := map[uint32]bool{}
	for len(ended) < 2 {
		f, _, err := ReadFrame(r, nil, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		if f.Type == FrameEnd {
			ended[f.Stream] = true
		}
	}
	if !ended[1] || !ended[3] {
		t.Fatalf("ended %v, want streams 1 and 3", ended)
	}
}

// A request too large for a frame fails in the client, before sending.
func TestRequestOverTheFrameLimit(t *testing.T) {
	addr, _ := serve(t, echo, ServerConfig{})
	tr := NewTransport(TransportConfig{Limits: Limits{FrameBytesMax: 100, StreamsMax: 4, HeadersMax: 8, HeaderBytesMax: 100}})
	_, err := (&http.Client{Transport: tr}).Post("http://"+addr+"/", "text/plain", strings.NewReader(strings.Repeat("x", 200)))
	if err == nil || !strings.Contains(err.Error(), "frame limit") {
		t.Fatalf("oversized request: %v", err)
	}
}

// FuzzReadFrame feeds the server's decoding arbitrary bytes: it returns
// errors, never panics, and never allocates past the limit.
func FuzzReadFrame(f *testing.F) {
	f.Add(request(&testing.T{}, 1, "/v1/kv/a", []byte("v")))
	f.Add(appendFrame(nil, FrameCancel, 1, nil))
	head, _ := appendHead(nil, 1, 200, http.Header{"Coord-Leader": {"1"}}, DefaultLimits())
	f.Add(head)
	f.Add(binary.BigEndian.AppendUint32(nil, 1<<31))
	limits := Limits{FrameBytesMax: 1 << 12, StreamsMax: 4, HeadersMax: 4, HeaderBytesMax: 256}
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bufio.NewReader(bytes.NewReader(data))
		var buf []byte
		for {
			fr, next, err := ReadFrame(r, buf, limits.FrameBytesMax)
			buf = next
			if err != nil {
				return
			}
			if cap(buf) > limits.FrameBytesMax {
				t.Fatalf("buffer of %d bytes past the limit", cap(buf))
			}
			switch fr.Type {
			case FrameRequest:
				if rf, err := DecodeRequest(fr.Payload, limits); err == nil && len(rf.Header) > limits.HeadersMax {
					t.Fatalf("%d headers decoded past the limit", len(rf.Header))
				}
			case FrameHead:
				decodeHead(fr.Payload, limits)
			}
		}
	})
}

// A connection with no request in flight closes after IdleTimeout; one
// with a request in flight does not.
func TestIdleConnectionCloses(t *testing.T) {
	release := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-release
		io.WriteString(w, "ok")
	})
	addr, _ := serve(t, h, ServerConfig{IdleTimeout: 50 * time.Millisecond})
	c, r := rawConn(t, addr)
	if _, err := c.Write(request(t, 1, "/slow", nil)); err != nil {
		t.Fatal(err)
	}
	// The request outlasts the idle timeout many times over (the handler
	// waits for release, sent only after a read that would fail had the
	// connection been closed meanwhile): its answer still arrives.
	go func() {
		time.Sleep(300 * time.Millisecond) // lets the idle timeout pass several times; not a wait for a state
		close(release)
	}()
	var buf []byte
	ended := false
	for !ended {
		f, next, err := ReadFrame(r, buf, 1<<20)
		buf = next
		if err != nil {
			t.Fatalf("while a request was in flight: %v", err)
		}
		ended = f.Type == FrameEnd
	}
	if _, _, err := ReadFrame(r, buf, 1<<20); !errors.Is(err, io.EOF) {
		t.Fatalf("idle connection: %v, want it closed", err)
	}
}

// Drain closes idle connections, lets requests in flight finish and
// refuses new ones.
func TestDrain(t *testing.T) {
	started, release := make(chan struct{}), make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			close(started)
			<-release
		}
		io.WriteString(w, "ok")
	})
	addr, ws := serve(t, h, ServerConfig{})
	busy, busyReader := rawConn(t, addr)
	idle, idleReader := rawConn(t, addr)
	if _, err := idle.Write(request(t, 1, "/", nil)); err != nil {
		t.Fatal(err)
	}
	var buf []byte
	for {
		f, next, err := ReadFrame(idleReader, buf, 1<<20)
		buf = next
		if err != nil {
			t.Fatal(err)
		}
		if f.Type == FrameEnd {
			break
		}
	}
	if _, err := busy.Write(request(t, 1, "/slow", nil)); err != nil {
		t.Fatal(err)
	}
	<-started
	ws.Drain()
	if _, _, err := ReadFrame(idleReader, buf, 1<<20); !errors.Is(err, io.EOF) {
		t.Fatalf("idle connection after Drain: %v, want it closed", err)
	}
	if _, err := busy.Write(request(t, 3, "/", nil)); err != nil {
		t.Fatal(err)
	}
	f, _, err := ReadFrame(busyReader, buf, 1<<20)
	if err != nil || f.Type != FrameRefuse || f.Stream != 3 {
		t.Fatalf("a new request after Drain: %+v %v, want it refused", f, err)
	}
	close(release)
	types := []FrameType{}
	for {
		f, next, err := ReadFrame(busyReader, buf, 1<<20)
		buf = next
		if err != nil {
			if !errors.Is(err, io.EOF) {
				t.Fatal(err)
			}
			break
		}
		types = append(types, f.Type)
	}
	if fmt.Sprint(types) != fmt.Sprint([]FrameType{FrameHead, FrameData, FrameEnd}) {
		t.Fatalf("the request in flight at Drain got frames %v, want head, data, end, then the close", types)
	}
}

// A handler that panics mid-answer loses its answer: the client's read
// fails rather than taking the cut answer for a whole one, and the
// connection carries on.
func TestPanickingHandlerFailsItsStream(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/panic" {
			io.WriteString(w, "half an answer")
			panic(http.ErrAbortHandler)
		}
		io.WriteString(w, "ok")
	})
	addr, _ := serve(t, h, ServerConfig{})
	hc := client(t)
	resp, err := hc.Get("http://" + addr + "/panic")
	if err == nil {
		_, err = io.ReadAll(resp.Body)
		resp.Body.Close()
	}
	if err == nil || !strings.Contains(err.Error(), "lost the answer") || errors.Is(err, ErrRefused) {
		t.Fatalf("a panicking handler's answer: %v, want it lost (and not refused: the handler ran)", err)
	}
	resp, err = hc.Get("http://" + addr + "/next")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
}

// Connections still being sorted (no byte sent yet) count against
// SortingMax: one more is closed at once; once they are sorted, there is
// room again.
func TestSortingMaxBoundsUnsortedConnections(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ws := NewServer(echo, ServerConfig{Logger: quiet})
	l := NewListener(inner, ListenerConfig{SortTimeout: time.Minute, SortingMax: 1}, func(c net.Conn) { ws.ServeConn(c) })
	srv := &http.Server{Handler: echo}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close(); ws.Drain() })
	silent, err := net.Dial("tcp", l.Addr().String()) // sends nothing: stays in sorting
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	// The listener's accept loop takes silent first (it was dialed first
	// and the backlog is served in order), so the next one is over the
	// bound and closed without a byte read.
	extra, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	extra.Write(append([]byte(Preface), request(t, 1, "/", nil)...)) // may fail: it is closed
	if f, _, err := ReadFrame(bufio.NewReader(extra), nil, 1<<20); err == nil {
		t.Fatalf("a connection over SortingMax was served: %+v", f)
	}
	// silent sends the preface: sorted, it makes room.
	io.WriteString(silent, Preface)
	if _, err := silent.Write(request(t, 1, "/", nil)); err != nil {
		t.Fatal(err)
	}
	if f, _, err := ReadFrame(bufio.NewReader(silent), nil, 1<<20); err != nil || f.Type != FrameHead {
		t.Fatalf("the sorted connection: %+v %v", f, err)
	}
	resp, err := client(t).Get("http://" + l.Addr().String() + "/after")
	if err != nil {
		t.Fatalf("after the first was sorted: %v", err)
	}
	resp.Body.Close()
}

// A request's context ends when its connection closes.
func TestConnectionCloseEndsRequests(t *testing.T) {
	started, ended := make(chan struct{}), make(chan error, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(started)
		<-r.Context().Done()
		ended <- r.Context().Err()
	})
	addr, _ := serve(t, h, ServerConfig{})
	c, _ := rawConn(t, addr)
	if _, err := c.Write(request(t, 1, "/block", nil)); err != nil {
		t.Fatal(err)
	}
	<-started
	c.Close()
	if err := <-ended; !errors.Is(err, context.Canceled) {
		t.Fatalf("the handler's context after its connection closed: %v", err)
	}
}
