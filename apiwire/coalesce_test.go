package apiwire

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// writeCountingConn counts the writes to it and signals each on wrote.
type writeCountingConn struct {
	net.Conn
	writes atomic.Int32
	wrote  chan struct{}
}

// serveCounting serves one connection with h (serveConn), through a
// writeCountingConn that signals wrote, and returns the client's end and
// the server's.
func serveCounting(t *testing.T, h http.Handler, wrote chan struct{}) (net.Conn, *writeCountingConn) {
	t.Helper()
	counting := make(chan *writeCountingConn, 1)
	c, _ := serveConn(t, h, func(c net.Conn) net.Conn {
		cc := &writeCountingConn{Conn: c, wrote: wrote}
		counting <- cc
		return cc
	})
	return c, <-counting
}

func (c *writeCountingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	select {
	case c.wrote <- struct{}{}:
	default:
	}
	return c.Conn.Write(p)
}

// A short answer (head, data, end) leaves in one write: its head and data
// wait for its end rather than each waking the writer (a write syscall per
// frame was most of the leader's writes under the watch load). The handler
// gives the writer a moment after its data, in which a writer woken by the
// head would have sent it alone.
func TestShortAnswerLeavesInOneWrite(t *testing.T) {
	wrote := make(chan struct{}, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Coord-Node", "7")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"revision":3}`)
		select { // the writer's chance to send the head and data alone
		case <-wrote:
		case <-time.After(100 * time.Millisecond):
		}
	})
	c, cc := serveCounting(t, h, wrote)
	defer c.Close()
	r := bufio.NewReader(c)
	for i, stream := range []uint32{1, 3} {
		before := cc.writes.Load()
		if _, err := c.Write(request(t, stream, "/v1/kv/a", nil)); err != nil {
			t.Fatal(err)
		}
		var types []FrameType
		for len(types) == 0 || types[len(types)-1] != FrameEnd {
			f, _, err := readFrame(r, nil, 1<<20, nil)
			if err != nil {
				t.Fatalf("answer %d: %v after frames %v", i, err, types)
			}
			types = append(types, f.Type)
		}
		if n := cc.writes.Load() - before; n != 1 || len(types) != 3 {
			t.Fatalf("answer %d: frames %v in %d writes, want head, data and end in 1", i, types, n)
		}
	}
}

// Answers that become ready together leave together: handlers released at
// once (as a Raft batch's commit releases its writes) do not each write
// their own answer; the first to send yields once, and the others' answers
// join its write. GOMAXPROCS is 1 so that the handlers run one after the
// other, as on a busy server: without the yield each finds no write in
// progress and writes alone, one write per answer.
func TestAnswersReadyTogetherLeaveTogether(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	const answers = 8
	started := make(chan struct{}, answers)
	release := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		started <- struct{}{}
		<-release
		io.WriteString(w, `{"revision":3}`)
	})
	c, cc := serveCounting(t, h, make(chan struct{}, 1))
	defer c.Close()
	for i := range answers {
		if _, err := c.Write(request(t, uint32(2*i+1), "/v1/kv/a", nil)); err != nil {
			t.Fatal(err)
		}
	}
	for range answers {
		<-started
	}
	before := cc.writes.Load()
	close(release)
	r := bufio.NewReader(c)
	for ended := 0; ended < answers; {
		f, _, err := readFrame(r, nil, 1<<20, nil)
		if err != nil {
			t.Fatalf("after %d answers: %v", ended, err)
		}
		if f.Type == FrameEnd {
			ended++
		}
	}
	if n := cc.writes.Load() - before; n > 2 {
		t.Fatalf("%d answers ready together left in %d writes, want 1 or 2", answers, n)
	}
}

// goroutineID is the number runtime.Stack gives the calling goroutine.
func goroutineID() string {
	b := make([]byte, 64)
	b = b[:runtime.Stack(b, false)]
	id, _, _ := strings.Cut(strings.TrimPrefix(string(b), "goroutine "), " ")
	return id
}

// A connection's requests one after the other are served by the workers
// it keeps, goroutines that keep the stack the handler grew (a goroutine started
// per request grows and copies its stack again each time: 5% of the
// leader's CPU under the watch load); the workers end with their
// connection.
func TestWorkerServesTheNextRequest(t *testing.T) {
	before := runtime.NumGoroutine()
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, goroutineID())
	})
	c, served := serveConn(t, h, nil)
	r := bufio.NewReader(c)
	var ids []string
	for i := range 4 {
		if _, err := c.Write(request(t, uint32(2*i+1), "/v1/kv/a", nil)); err != nil {
			t.Fatal(err)
		}
		var body []byte
		for {
			f, _, err := readFrame(r, nil, 1<<20, nil)
			if err != nil {
				t.Fatalf("answer %d: %v", i, err)
			}
			if f.Type == FrameData {
				body = append(body, f.Payload...)
			}
			if f.Type == FrameEnd {
				break
			}
		}
		ids = append(ids, string(body))
	}
	// A request that comes as the last one's worker is about to wait goes
	// to a new worker, and idle workers take requests in turn: of four,
	// at least two share a worker unless each had a goroutine of its own.
	if slices.Contains(ids, "") || len(slices.Compact(slices.Sorted(slices.Values(ids)))) == len(ids) {
		t.Fatalf("requests one after the other served by goroutines %q, want a worker serving more than one", ids)
	}
	c.Close()
	if err := <-served; err != nil {
		t.Fatal(err)
	}
	// The worker ends once the connection did: wait for the goroutines
	// to come back to their number before it (a condition, not a time).
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines 10 s after the connection closed, %d before it opened", runtime.NumGoroutine(), before)
		}
		runtime.Gosched()
	}
}
