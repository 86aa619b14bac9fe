package client

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestOnlyAnswersThroughALeaderSpareTheProbe: an attempt that outlives
// its timeout at a node that answered this client lately is awaited
// without a readiness probe, but only if that answer came through a
// leader (a write or a linearizable read that succeeded). A node cut off
// from its leader still answers stale reads and refusals (4xx) from its
// own state: those must not spare its slow attempt the probe, which the
// node fails (not ready), so the attempt is abandoned at its first check
// and the write goes to the next node.
func TestOnlyAnswersThroughALeaderSpareTheProbe(t *testing.T) {
	for _, tt := range []struct {
		name    string
		before  func(ctx context.Context, cl *Client) error
		awaited int64 // attempts awaited at a check before the probe
	}{
		{"stale read", func(ctx context.Context, cl *Client) error {
			_, err := cl.Get(ctx, "k", Stale())
			return err
		}, 0},
		{"refusal", func(ctx context.Context, cl *Client) error {
			if _, err := cl.Put(ctx, "refused", nil); err == nil {
				t.Error("put refused: no error")
			}
			return nil
		}, 0},
		{"write", func(ctx context.Context, cl *Client) error {
			_, err := cl.Put(ctx, "ok", nil)
			return err
		}, 1},
		{"linearizable read", func(ctx context.Context, cl *Client) error {
			_, err := cl.Get(ctx, "k")
			return err
		}, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			// cutOff answers from its own state, holds the slow write,
			// and is not ready (it knows no leader).
			cutOff := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				switch r.URL.Path {
				case "/readyz":
					w.WriteHeader(http.StatusServiceUnavailable)
				case "/v1/kv/k":
					w.Write([]byte(`{"key":"k","value":"v","revision":2}`))
				case "/v1/kv/refused":
					w.WriteHeader(http.StatusForbidden)
					w.Write([]byte(`{"error":"token may not write refused","code":"permission_denied"}`))
				case "/v1/kv/ok":
					w.Write([]byte(`{"revision":3}`))
				default:
					<-r.Context().Done()
				}
			}))
			defer cutOff.Close()
			good := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.Write([]byte(`{"revision":4}`))
			}))
			defer good.Close()
			cfg := DefaultConfig(strings.TrimPrefix(cutOff.URL, "http://"), strings.TrimPrefix(good.URL, "http://"))
			cfg.WarmInterval = 0
			// The first check comes 1 s into the slow attempt, and an
			// answer counts for 2 s: the answer just before it counts then,
			// unless the machine stalls a second.
			cfg.AttemptTimeout = 2 * time.Second
			cl, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			ctx := testContext(t)
			if err := tt.before(ctx, cl); err != nil {
				t.Fatalf("%s: %v", tt.name, err)
			}
			if rev, err := cl.Put(ctx, "slow", nil); err != nil || rev != 4 {
				t.Fatalf("slow put: %d %v, want revision 4 from the second node", rev, err)
			}
			if probes, awaited := cl.counts.probes.Load(), cl.counts.awaited.Load(); probes != 1 || awaited != tt.awaited {
				t.Fatalf("after a %s, the slow attempt was awaited %d times and probed %d times; want %d and 1", tt.name, awaited, probes, tt.awaited)
			}
		})
	}
}
