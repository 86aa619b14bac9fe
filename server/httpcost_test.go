package server

import (
	"bytes"
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"coord/api"
)

// TestWriteResponseEncoding checks the hand-made encoding of a write's
// answer (appendWriteResponse) against encoding/json's, byte for byte.
func TestWriteResponseEncoding(t *testing.T) {
	for _, rev := range []uint64{0, 1, 9, 10, 12345, math.MaxUint32, math.MaxUint64} {
		var want bytes.Buffer
		if err := json.NewEncoder(&want).Encode(api.WriteResponse{Revision: rev}); err != nil {
			t.Fatal(err)
		}
		if got := appendWriteResponse(nil, api.WriteResponse{Revision: rev}); !bytes.Equal(got, want.Bytes()) {
			t.Errorf("revision %d: %q, want %q", rev, got, want.Bytes())
		}
	}
}

// TestReadBody reads bodies of declared and undeclared length, within the
// limit and beyond it.
func TestReadBody(t *testing.T) {
	const limit = 8
	for _, tc := range []struct {
		name    string
		body    string
		chunked bool // no Content-Length
		wantErr bool
	}{
		{"empty", "", false, false},
		{"declared", "12345678", false, false},
		{"declared too long", "123456789", false, true},
		{"chunked", "1234", true, false},
		{"chunked too long", "123456789", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest("PUT", "/v1/kv/k", strings.NewReader(tc.body))
			if tc.chunked {
				r.ContentLength = -1
			}
			got, err := readBody(httptest.NewRecorder(), r, limit)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("read %q, want an error past %d bytes", got, limit)
				}
				return
			}
			if err != nil || string(got) != tc.body || got == nil {
				t.Fatalf("got %q (nil %v), %v; want %q", got, got == nil, err, tc.body)
			}
		})
	}
}

// TestRequestParam checks that a request's parameters read alike whether
// its query is scanned (short) or parsed into a map (long), present or
// not, and that a short query is never parsed into a map.
func TestRequestParam(t *testing.T) {
	r := &request{Request: httptest.NewRequest("PUT", "/v1/kv/k?prev_revision=7&stale=true", nil)}
	if got := r.param(api.ParamPrevRevision); got != "7" || r.paramsParsed {
		t.Fatalf("prev_revision %q (parsed %v), want 7 and no map", got, r.paramsParsed)
	}
	if v, err := boolParam(r, api.ParamStale); err != nil || !v {
		t.Fatalf("stale %v %v, want true", v, err)
	}
	long := "/v1/kv/k?" + strings.Repeat("x=1&", queryScanParamsMax) + "prev_revision=9"
	lr := &request{Request: httptest.NewRequest("PUT", long, nil)}
	if got := lr.param(api.ParamPrevRevision); got != "9" || !lr.paramsParsed {
		t.Fatalf("long query: prev_revision %q (parsed %v), want 9 from the map", got, lr.paramsParsed)
	}
	none := &request{Request: httptest.NewRequest("PUT", "/v1/kv/k", nil)}
	if got := none.param(api.ParamPrevRevision); got != "" || none.paramsParsed {
		t.Fatalf("no query: %q (parsed %v), want nothing parsed", got, none.paramsParsed)
	}
}

// queryValueCases are queries on which queryValue must agree with
// url.ParseQuery: repeats, escapes, '+', bad escapes, semicolons, empty
// pairs, keys without '='.
var queryValueCases = []string{
	"", "a=1", "a=1&a=2", "a", "a=", "=1", "&&a=1&&", "a=1;b=2&a=3", "b=2&a=1;x&a=4",
	"%61=5", "a%3D=6", "a=%zz&a=7", "%zz=1&a=8", "a=x+y", "a+b=9", "a=%20%2B", "a=1&b=2&c=3&client_id=4&seq=5&ack=6",
	"a=%", "a=%4", "a=1%", "%=1&a=2", "a=1=2", ";", "a;=1&a=3",
}

// TestQueryValueMatchesParseQuery checks queryValue against url.ParseQuery's
// first value, for every name that occurs in the cases and one that does not.
func TestQueryValueMatchesParseQuery(t *testing.T) {
	for _, raw := range queryValueCases {
		checkQueryValue(t, raw)
	}
}

// FuzzQueryValue checks queryValue against url.ParseQuery on any query.
func FuzzQueryValue(f *testing.F) {
	for _, raw := range queryValueCases {
		f.Add(raw)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		if strings.Count(raw, "&") >= queryScanParamsMax {
			return // param parses these into a map
		}
		checkQueryValue(t, raw)
	})
}

func checkQueryValue(t *testing.T, raw string) {
	t.Helper()
	want, _ := url.ParseQuery(raw)
	names := []string{"a", "b", "seq", "a b", "a=", "missing", ""}
	for name := range want {
		names = append(names, name)
	}
	for _, name := range names {
		if got := queryValue(raw, name); got != want.Get(name) {
			t.Fatalf("queryValue(%q, %q) = %q, url.ParseQuery's Get %q", raw, name, got, want.Get(name))
		}
	}
}

// TestQueryValueAllocations checks that scanning a write's query for its
// parameters allocates nothing.
func TestQueryValueAllocations(t *testing.T) {
	raw := "client_id=12345&seq=678&ack=677"
	if n := testing.AllocsPerRun(100, func() {
		for _, name := range []string{api.ParamClientID, api.ParamSeq, api.ParamAck, api.ParamPrevRevision} {
			_ = queryValue(raw, name)
		}
	}); n != 0 {
		t.Fatalf("%v allocations, want 0", n)
	}
}

// TestAnswerHeaders checks the headers every answer carries, set without
// http.Header.Set: canonical keys, one value each.
func TestAnswerHeaders(t *testing.T) {
	p := newPair(t)
	resp := call(t, "PUT", p.followURL+"/v1/kv/h", "v")
	resp.want(t, http.StatusOK)
	for key, want := range map[string]string{api.HeaderNode: "2", api.HeaderLeader: "1", "Content-Type": "application/json"} {
		if got := resp.header.Values(key); len(got) != 1 || got[0] != want {
			t.Errorf("%s: %q, want [%q]", key, got, want)
		}
	}
	if rev, ok := resp.body["revision"].(float64); !ok || rev < 1 {
		t.Errorf("body %v: want a revision", resp.body)
	}
}

// TestNodeHeadersFollowTheLeader checks the answers' shared Coord-Node and
// Coord-Leader values: they change with the leader, Coord-Leader goes when
// none is known, and a header added to one answer does not reach the
// next one's.
func TestNodeHeadersFollowTheLeader(t *testing.T) {
	f := newFake(2, 1)
	a := NewAPI(f, APIConfig{})
	check := func(node, leader string) http.Header {
		t.Helper()
		h := http.Header{}
		a.setNodeHeaders(h)
		if got := h.Values(api.HeaderNode); len(got) != 1 || got[0] != node {
			t.Fatalf("Coord-Node %q, want [%s]", got, node)
		}
		if got := h.Values(api.HeaderLeader); (leader == "" && len(got) != 0) || (leader != "" && (len(got) != 1 || got[0] != leader)) {
			t.Fatalf("Coord-Leader %q, want %q", got, leader)
		}
		return h
	}
	h := check("2", "1")
	h.Add(api.HeaderLeader, "9")
	h.Add(api.HeaderNode, "9")
	check("2", "1")
	f.mu.Lock()
	f.leader = 3
	f.mu.Unlock()
	check("2", "3")
	f.mu.Lock()
	f.leader = 0
	f.mu.Unlock()
	check("2", "")
}
