package server

import (
	"bytes"
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
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

// TestRequestParamParsedOnce checks that a request's parameters read
// alike through the cached query, present or not.
func TestRequestParamParsedOnce(t *testing.T) {
	r := &request{Request: httptest.NewRequest("PUT", "/v1/kv/k?prev_revision=7&stale=true", nil)}
	if got := r.param(api.ParamPrevRevision); got != "7" {
		t.Fatalf("prev_revision %q, want 7", got)
	}
	r.URL.RawQuery = "prev_revision=8" // parsed already: the first parse stands
	if got := r.param(api.ParamPrevRevision); got != "7" {
		t.Fatalf("prev_revision %q after the first parse, want 7", got)
	}
	if v, err := boolParam(r, api.ParamStale); err != nil || !v {
		t.Fatalf("stale %v %v, want true", v, err)
	}
	none := &request{Request: httptest.NewRequest("PUT", "/v1/kv/k", nil)}
	if got := none.param(api.ParamPrevRevision); got != "" || none.paramsParsed {
		t.Fatalf("no query: %q (parsed %v), want nothing parsed", got, none.paramsParsed)
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
