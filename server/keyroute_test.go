package server

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestKeyRoutesMatchTheMux serves the same requests, over real TCP, to an
// API (whose key requests skip the mux: keyRoutes) and to another over the
// same state that serves every request through its mux, and checks that
// every answer is the same: status, body and headers. The requests include
// what the direct route must leave to the mux (escapes, paths to clean, a
// trailing slash, no key, HEAD) and malformed ones it takes (bad names,
// bad parameters), which must get the same error.
func TestKeyRoutesMatchTheMux(t *testing.T) {
	direct := NewAPI(newFake(1, 1), APIConfig{})
	viaMux := NewAPI(newFake(1, 1), APIConfig{})
	ds := httptest.NewServer(direct)
	defer ds.Close()
	ms := httptest.NewServer(http.HandlerFunc(viaMux.mux.ServeHTTP))
	defer ms.Close()
	requests := []struct{ method, target, body string }{
		{"PUT", "/v1/kv/a", "1"},
		{"PUT", "/v1/kv/a/b/c", "2"},
		{"GET", "/v1/kv/a", ""},
		{"GET", "/v1/kv/a/b/c", ""},
		{"GET", "/v1/kv/a?stale=true", ""},
		{"GET", "/v1/kv/a?stale=maybe", ""},
		{"GET", "/v1/kv/missing", ""},
		{"HEAD", "/v1/kv/a", ""},
		{"PUT", "/v1/kv/a?prev_revision=1", "3"},
		{"PUT", "/v1/kv/a?prev_revision=1", "4"},
		{"PUT", "/v1/kv/a?prev_revision=x", "5"},
		{"PUT", "/v1/kv/s?client_id=7&seq=1&ack=0", "6"},
		{"PUT", "/v1/kv/s?client_id=7&seq=1&ack=0", "6"},
		{"PUT", "/v1/kv/s?seq=1", "7"},
		{"PUT", "/v1/kv/s?client_id=x&seq=1", "8"},
		{"PUT", "/v1/kv/%61", "9"},
		{"PUT", "/v1/kv/a%2Fb", "10"},
		{"PUT", "/v1/kv/a//b", "12"},
		{"PUT", "/v1/kv/a/./b", "13"},
		{"PUT", "/v1/kv/a/../b", "14"},
		{"PUT", "/v1/kv/a/", "15"},
		{"PUT", "/v1/kv/", "16"},
		{"PUT", "/v1/kv", "17"},
		{"PUT", "/v1/kv/" + strings.Repeat("k", 2000), "18"},
		{"PUT", "/v1/kv/sp ace", "19"},
		{"PUT", "/v1/kv/big", strings.Repeat("v", DefaultLimits().ValueBytes+1)},
		{"POST", "/v1/kv/a", "20"},
		{"DELETE", "/v1/kv/a/b/c", ""},
		{"DELETE", "/v1/kv/a/b/c", ""},
		{"DELETE", "/v1/kv/a?prev_revision=999", ""},
		{"DELETE", "/v1/kv/a/", ""},
		{"GET", "/v1/kv/a/b/c", ""},
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	do := func(base, method, target, body string) (int, http.Header, string) {
		t.Helper()
		req, err := http.NewRequest(method, base+target, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		resp.Header.Del("Date")
		return resp.StatusCode, resp.Header, string(b)
	}
	for _, r := range requests {
		ds, dh, db := do(ds.URL, r.method, r.target, r.body)
		ms, mh, mb := do(ms.URL, r.method, r.target, r.body)
		if ds != ms || db != mb || !sameHeaders(dh, mh) {
			t.Errorf("%s %s: direct %d %v %q; through the mux %d %v %q", r.method, clipBody(r.target), ds, dh, clipBody(db), ms, mh, clipBody(mb))
		}
	}
}

func sameHeaders(a, b http.Header) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if strings.Join(v, "\x00") != strings.Join(b[k], "\x00") {
			return false
		}
	}
	return true
}

// TestKeyRouteTakesOnlyWhatTheMuxWouldRouteAsIs checks which requests the
// direct route takes, and the path value and pattern it sets: the mux's.
func TestKeyRouteTakesOnlyWhatTheMuxWouldRouteAsIs(t *testing.T) {
	a := NewAPI(newFake(1, 1), APIConfig{})
	for target, want := range map[string]string{
		"/v1/kv/a": "a", "/v1/kv/a/b": "a/b", "/v1/kv/a?x=1": "a", "/v1/kv/a.b": "a.b",
		"/v1/kv/": "", "/v1/kv/a/": "", "/v1/kv//a": "", "/v1/kv/a/../b": "", "/v1/kv/%61": "", "/v1/kvx": "", "/v1/watch/kv/a": "",
	} {
		for _, method := range []string{"GET", "PUT", "DELETE", "HEAD", "POST"} {
			r := httptest.NewRequest(method, target, nil)
			h := a.keyRoutes.route(r)
			takes := want != "" && method != "HEAD" && method != "POST"
			if (h != nil) != takes {
				t.Fatalf("%s %s: taken %v, want %v", method, target, h != nil, takes)
			}
			if !takes {
				continue
			}
			m := httptest.NewRequest(method, target, nil)
			_, pattern := a.mux.Handler(m)
			if r.PathValue("key") != want || r.Pattern != pattern {
				t.Fatalf("%s %s: key %q pattern %q; want %q and the mux's %q", method, target, r.PathValue("key"), r.Pattern, want, pattern)
			}
		}
	}
}
