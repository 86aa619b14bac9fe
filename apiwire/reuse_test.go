package apiwire

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strconv"
	"testing"
)

// wireAnswer is an answer as read off the connection.
type wireAnswer struct {
	status int
	header http.Header
	body   string
}

// serveOne serves one connection accepted on a new listener with h and
// returns the client's end and a reader over it. When the test ends, it
// closes the connection and checks what ServeConn returned.
func serveOne(t *testing.T, h http.Handler) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, served := serveConn(t, h, nil)
	t.Cleanup(func() {
		c.Close()
		if err := <-served; err != nil {
			t.Error(err)
		}
	})
	return c, bufio.NewReader(c)
}

// serveConn serves one connection accepted on a new listener with h,
// the server's end passed through wrap first if wrap is not nil, and
// returns the client's end (dialed) and a channel that receives what
// ServeConn returned (or the accept's error). The caller closes the
// client's end; the listener closes when the test ends.
func serveConn(t *testing.T, h http.Handler, wrap func(net.Conn) net.Conn) (net.Conn, <-chan error) {
	t.Helper()
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { inner.Close() })
	served := make(chan error, 1)
	go func() {
		c, err := inner.Accept()
		if err != nil {
			served <- err
			return
		}
		if wrap != nil {
			c = wrap(c)
		}
		served <- ServeConn(c, h, ServerConfig{Logger: quiet})
	}()
	c, err := net.Dial("tcp", inner.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	return c, served
}

// roundTrip sends frame and reads its stream's answer to the end.
func roundTrip(t *testing.T, c net.Conn, r *bufio.Reader, frame []byte) wireAnswer {
	t.Helper()
	if _, err := c.Write(frame); err != nil {
		t.Fatal(err)
	}
	var a wireAnswer
	for {
		f, _, err := readFrame(r, nil, 1<<20, nil)
		if err != nil {
			t.Fatal(err)
		}
		switch f.Type {
		case FrameHead:
			if a.status, a.header, err = decodeHead(f.Payload, DefaultLimits()); err != nil {
				t.Fatal(err)
			}
		case FrameData:
			a.body += string(f.Payload)
		case FrameEnd:
			return a
		default:
			t.Fatalf("frame type %d", f.Type)
		}
	}
}

// A worker serves its connection's requests one after the other with one
// ResponseWriter (work): each request starts with no headers and no
// status of the one before. Requests alternate between one that sets
// headers and a status and one that sets none; a request sent once the
// answer before it came is served by an idle worker unless none was yet
// waiting for it, and idle workers take requests in turn (a channel's
// receivers are served in order), so the two kinds come in an irregular
// order: some worker serves a request of the second kind after one of the
// first, whichever of its workers a connection rotates through.
func TestWorkerResetsItsWriterForTheNextRequest(t *testing.T) {
	var ids, kinds []string
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ids, kinds = append(ids, goroutineID()), append(kinds, r.URL.Path)
		if len(w.Header()) != 0 {
			t.Errorf("request %s: headers %v before the handler set any", r.URL.Path, w.Header())
		}
		if r.URL.Path == "/first" {
			w.Header().Set("Coord-First", "1")
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTeapot)
			io.WriteString(w, "first")
			return
		}
		io.WriteString(w, "second")
	})
	c, r := serveOne(t, h)
	const order = "FSSFFSFSSSFFSFFFSSFSFSSFFFSFSS" // F: /first, S: /second
	for i := range len(order) {
		if order[i] == 'F' {
			a := roundTrip(t, c, r, request(t, uint32(2*i+1), "/first", nil))
			if a.status != http.StatusTeapot || a.header.Get("Coord-First") != "1" || a.body != "first" {
				t.Fatalf("answer %d: %+v", i, a)
			}
			continue
		}
		a := roundTrip(t, c, r, request(t, uint32(2*i+1), "/second", nil))
		if a.status != http.StatusOK || a.header.Get("Coord-First") != "" || a.header.Get("Retry-After") != "" || a.body != "second" {
			t.Fatalf("answer %d %+v: want 200, none of the first's headers, body second", i, a)
		}
	}
	servedFirst := map[string]bool{}
	reused := false
	for i, id := range ids {
		if kinds[i] == "/first" {
			servedFirst[id] = true
		} else if servedFirst[id] {
			reused = true
		}
	}
	if !reused {
		t.Fatalf("served by goroutines %q: no worker served /second after /first", ids)
	}
}

// A request's body is a MemoryBody: a handler may take the bytes it has not
// read without a copy, and then reads nothing more; the bytes are the
// frame's, copied (they outlive the reader's buffer).
func TestRequestBodyTakeBytes(t *testing.T) {
	type taken struct {
		read, rest []byte
		after      int
	}
	got := make(chan taken, 2)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mb, ok := r.Body.(MemoryBody)
		if !ok {
			t.Errorf("body %T is not a MemoryBody", r.Body)
			return
		}
		n, _ := strconv.Atoi(r.URL.Query().Get("read"))
		read := make([]byte, n)
		if _, err := io.ReadFull(mb, read); err != nil {
			t.Error(err)
		}
		rest := mb.TakeBytes()
		after, _ := mb.Read(make([]byte, 8))
		got <- taken{read, rest, after}
	})
	c, r := serveOne(t, h)
	body := []byte("0123456789")
	for i, n := range []int{0, 4} {
		roundTrip(t, c, r, request(t, uint32(2*i+1), "/?read="+strconv.Itoa(n), body))
		tk := <-got
		if string(tk.read) != string(body[:n]) || string(tk.rest) != string(body[n:]) || tk.after != 0 {
			t.Fatalf("read %d first: read %q, took %q, then read %d bytes; want %q, %q, 0", n, tk.read, tk.rest, tk.after, body[:n], body[n:])
		}
	}
}
