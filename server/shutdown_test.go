package server

import (
	"context"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// A stopping API ends what would keep it open for its whole bound: a
// request that never ends on its own (a stream) sees its context end, and
// a connection that never sent a request is closed; shutdown then returns
// without running out of its bound. A request that ends on its own is
// answered as usual.
func TestShutdownEndsStreamsAndUnusedConnections(t *testing.T) {
	streaming := make(chan struct{})
	streamEnded := make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc("/stream", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		close(streaming)
		<-r.Context().Done()
		close(streamEnded)
	})
	srv := &http.Server{Handler: mux}
	api := newStoppableAPI(srv)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(l)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+l.Addr().String()+"/stream", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	<-streaming
	unused, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer unused.Close()
	// The server has seen the unused connection once it tracks it.
	for {
		_, changed := api.conns.active() // taken first: a change after it closes it
		api.conns.mu.Lock()
		n := len(api.conns.state)
		api.conns.mu.Unlock()
		if n == 2 {
			break
		}
		select {
		case <-changed:
		case <-ctx.Done():
			t.Fatal("the server never saw the second connection")
		}
	}

	// A bound far beyond the grace: running out of it is the failure.
	if err := api.shutdown(20 * time.Second); err != nil {
		t.Fatalf("shutdown: %v, want nil (nothing left open)", err)
	}
	select {
	case <-streamEnded:
	default:
		t.Fatal("the stream's handler is still running after shutdown")
	}
	unused.SetReadDeadline(time.Now().Add(20 * time.Second))
	if _, err := unused.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("unused connection after shutdown: read %v, want EOF (closed by the server)", err)
	}
}
