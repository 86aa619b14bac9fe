package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// A leader's first event is input: a malformed or unsafe one is refused
// with a clear error, and the stream closed.
func TestOpenLeaseSessionRefusesBadFirstEvents(t *testing.T) {
	// A malformed session is refused at once; a stream cut short may be a
	// leader that just died, and is retried until the context ends.
	cases := []struct {
		name, stream, says string
		malformed          bool
	}{
		{"not JSON", "event: session\ndata: {\n\n", "first event", true},
		{"wrong event", "event: keep-alive\ndata: {}\n\n", `first event "keep-alive"`, true},
		{"grace under 4 keep-alives", "event: session\n" + `data: {"token":1,"keep_alive_ms":500,"grace_ms":1000}` + "\n\n", "want 0 < 4", true},
		{"no keep-alive", "event: session\n" + `data: {"token":1,"keep_alive_ms":0,"grace_ms":1000}` + "\n\n", "want 0 < 4", true},
		{"line too long", "event: session\ndata: " + strings.Repeat("x", 8<<10) + "\n\n", "too long", false},
		{"closed at once", "", "unexpected EOF", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				fmt.Fprint(w, c.stream)
			}))
			defer srv.Close()
			cl, err := New(DefaultConfig(srv.URL))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			_, err = cl.OpenLeaseSession(ctx, "l", "h", 1)
			if err == nil || !strings.Contains(err.Error(), c.says) {
				t.Fatalf("open: %v, want an error saying %q", err, c.says)
			}
			if c.malformed != errors.Is(err, ErrMalformedSession) {
				t.Fatalf("open: %v: malformed %v, want %v", err, errors.Is(err, ErrMalformedSession), c.malformed)
			}
		})
	}
}

// Refusals are the cluster's answer, returned at once; missing arguments
// are refused before anything is sent.
func TestOpenLeaseSessionErrors(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusConflict)
		fmt.Fprint(w, `{"error":"token 1 of lease \"l\" is not current (current 9)","code":"lost","holder":"o","token":9}`)
	}))
	defer srv.Close()
	cl, err := New(DefaultConfig(srv.URL))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	_, err = cl.OpenLeaseSession(ctx, "l", "h", 1)
	var ce *Error
	if !errors.Is(err, ErrLost) || !errors.As(err, &ce) || ce.Holder != "o" || ce.Token != 9 {
		t.Fatalf("open of a stale token: %v, want ErrLost naming holder o, token 9", err)
	}
	for _, c := range []struct {
		name, holder string
		token        uint64
	}{{"", "h", 1}, {"l", "", 1}, {"l", "h", 0}} {
		if _, err := cl.OpenLeaseSession(ctx, c.name, c.holder, c.token); !errors.Is(err, ErrInvalid) {
			t.Errorf("open %+v: %v, want ErrInvalid", c, err)
		}
	}
}
