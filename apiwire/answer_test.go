package apiwire

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// readAnswer reads frames until stream's end and returns its status and
// data; frames of other streams go to other (nil: it fails the test).
func readAnswer(t *testing.T, r *bufio.Reader, stream uint32, other func(Frame)) (int, string) {
	t.Helper()
	status := 0
	var data bytes.Buffer
	for {
		f, _, err := ReadFrame(r, nil, 1<<20)
		if err != nil {
			t.Fatalf("reading stream %d: %v", stream, err)
		}
		if f.Stream != stream {
			if other == nil {
				t.Fatalf("frame type %d of stream %d while waiting for stream %d", f.Type, f.Stream, stream)
			}
			other(f)
			continue
		}
		switch f.Type {
		case FrameHead:
			st, _, err := decodeHead(f.Payload, DefaultLimits())
			if err != nil {
				t.Fatal(err)
			}
			status = st
		case FrameData:
			data.Write(f.Payload)
		case FrameEnd:
			return status, data.String()
		default:
			t.Fatalf("stream %d: frame type %d (%q)", stream, f.Type, f.Payload)
		}
	}
}

// An answer is held until its handler flushes or ends, as net/http's
// writer buffers it: a short answer's head, data and end then leave
// together, in one write the client reads at once, instead of the head
// first and a wake-up of the client's reader for each frame. Stream 1's
// handler writes its head and data and waits; stream 3's answer, made
// meanwhile on the same connection, arrives with nothing of stream 1
// before it. (Before answers were held, stream 1's head and data went
// ahead of it.)
func TestAnswerHeldUntilItsHandlerFlushesOrEnds(t *testing.T) {
	release := make(chan struct{})
	written := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			w.WriteHeader(http.StatusAccepted)
			io.WriteString(w, "slow answer")
			close(written)
			<-release
			return
		}
		io.WriteString(w, "quick answer")
	})
	addr, _ := serve(t, h, ServerConfig{})
	c, r := rawConn(t, addr)
	if _, err := c.Write(request(t, 1, "/slow", nil)); err != nil {
		t.Fatal(err)
	}
	<-written
	if _, err := c.Write(request(t, 3, "/quick", nil)); err != nil {
		t.Fatal(err)
	}
	if status, data := readAnswer(t, r, 3, nil); status != 200 || data != "quick answer" {
		t.Fatalf("stream 3: %d %q", status, data)
	}
	close(release)
	if status, data := readAnswer(t, r, 1, nil); status != http.StatusAccepted || data != "slow answer" {
		t.Fatalf("stream 1: %d %q", status, data)
	}
}

// Answers larger than what a stream holds before sending, from many
// streams at once on one connection, each written by its handler's
// goroutine or by the connection's writer, whichever is free, arrive
// whole and each on its stream.
func TestLargeAnswersFromManyStreamsArriveWhole(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := len(r.URL.Path)
		w.Write(bytes.Repeat([]byte(r.URL.Path), (2*flushBytesMin)/n+n))
	})
	addr, _ := serve(t, h, ServerConfig{})
	hc := client(t)
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := range 16 {
		wg.Go(func() {
			path := fmt.Sprintf("/stream-%d/", i)
			resp, err := hc.Get("http://" + addr + path)
			if err != nil {
				errs <- err
				return
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			n := len(path)
			if want := strings.Repeat(path, (2*flushBytesMin)/n+n); err != nil || string(b) != want {
				errs <- fmt.Errorf("%s: %d bytes (%v), want %d", path, len(b), err, len(want))
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// A client that stops reading does not hold a handler forever: the
// handler writing the answer itself gets the write deadline's error, and
// the connection closes.
func TestClientThatStopsReadingTimesOutTheHandlersWrite(t *testing.T) {
	ended := make(chan error, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		chunk := bytes.Repeat([]byte("x"), 1<<20)
		for {
			if _, err := w.Write(chunk); err != nil {
				ended <- err
				return
			}
		}
	})
	addr, _ := serve(t, h, ServerConfig{WriteTimeout: 200 * time.Millisecond})
	c, _ := rawConn(t, addr)
	if _, err := c.Write(request(t, 1, "/flood", nil)); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-ended:
		if ne, ok := errors.AsType[net.Error](err); !ok || !ne.Timeout() {
			t.Fatalf("the handler's write failed with %v, want a timeout", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the handler's write never failed")
	}
	// The connection is closed: reading drains what was sent, then ends.
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.Copy(io.Discard, c); err != nil {
		t.Fatalf("the connection did not close: %v", err)
	}
}
