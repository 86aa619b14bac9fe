package server

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"coord/api"
)

// A write that came before the hand-over began and is refused after it
// began (it reached the core after the transfer started, and the node,
// still leading, names itself) is answered as a held write is: once the
// target campaigns, naming it. Named itself, the stopping leader sent the
// client to a follower and back before the target.
func TestRefusalDuringTheTransferNamesTheTarget(t *testing.T) {
	entered := make(chan struct{})
	refuse := make(chan struct{})
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		<-refuse
		w.Header().Set(api.HeaderLeader, "1") // itself: it still leads
		self := uint64(1)
		writeJSON(w, http.StatusServiceUnavailable, api.ErrorResponse{Code: api.CodeUnavailable, Error: "refused (leader 1)", Leader: &self})
	})
	drain := newHandedOver(next, nil)
	srv := httptest.NewServer(drain)
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	type answer struct {
		status int
		leader string
		body   api.ErrorResponse
	}
	answered := make(chan answer, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, "PUT", srv.URL+"/v1/kv/k", strings.NewReader("v"))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Error(err)
			answered <- answer{}
			return
		}
		var body api.ErrorResponse
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
			t.Errorf("the refusal's body: %v", err)
		}
		resp.Body.Close()
		answered <- answer{resp.StatusCode, resp.Header.Get(api.HeaderLeader), body}
	}()
	select {
	case <-entered:
	case <-ctx.Done():
		t.Fatal("the write never reached the API")
	}
	drain.begin()
	close(refuse)
	select {
	case a := <-answered:
		t.Fatalf("refused during the transfer: answered at once (%d, leader %q), want it held until the target campaigns", a.status, a.leader)
	default:
	}
	drain.early(2)
	a := <-answered
	if a.status != http.StatusServiceUnavailable || a.leader != "2" {
		t.Fatalf("refused during the transfer: %d naming %q, want 503 naming the target, 2", a.status, a.leader)
	}
	if a.body.Code != api.CodeUnavailable || a.body.Leader == nil || *a.body.Leader != 2 {
		t.Fatalf("refused during the transfer: body %+v, want unavailable naming leader 2 as the header does", a.body)
	}
}

// A write that succeeds, or a refusal before any hand-over, passes
// through as it is.
func TestAnswersOutsideTheTransferPassThrough(t *testing.T) {
	for _, code := range []int{http.StatusOK, http.StatusServiceUnavailable} {
		next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set(api.HeaderLeader, "1")
			w.WriteHeader(code)
		})
		srv := httptest.NewServer(newHandedOver(next, nil))
		resp, err := http.Post(srv.URL+"/v1/kv/k", "text/plain", strings.NewReader("v"))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		srv.Close()
		if resp.StatusCode != code || resp.Header.Get(api.HeaderLeader) != "1" {
			t.Fatalf("answer %d outside a hand-over: %d naming %q, want it unchanged", code, resp.StatusCode, resp.Header.Get(api.HeaderLeader))
		}
	}
}

// The hand-over's handler costs a write no allocation outside a
// hand-over: every write passes through it, for an event that comes once
// in a process's life (BenchmarkAPIPutHandler's handedOver cases show the
// same through the API).
func TestHandedOverAllocatesNothingOutsideAHandOver(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector changes allocation counts")
	}
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	h := newHandedOver(next, nil)
	w := &discardWriter{header: http.Header{}}
	for _, method := range []string{"PUT", "GET"} {
		r := httptest.NewRequest(method, "/v1/kv/k", nil)
		if allocs := testing.AllocsPerRun(100, func() { h.ServeHTTP(w, r) }); allocs != 0 {
			t.Errorf("a %s outside a hand-over: %.1f allocations, want 0", method, allocs)
		}
		if w.code != http.StatusNoContent {
			t.Fatalf("a %s outside a hand-over: answered %d, want the handler's 204", method, w.code)
		}
	}
}
