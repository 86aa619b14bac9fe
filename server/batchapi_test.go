package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"coord/api"
)

func batchBody(t *testing.T, ops ...api.BatchOp) string {
	t.Helper()
	b, err := json.Marshal(api.BatchRequest{Ops: ops})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestAPIBatch(t *testing.T) {
	p := newPair(t)
	r1 := call(t, "PUT", p.leaderURL+"/v1/kv/x", "1").want(t, 200).num("revision")
	for _, base := range []string{p.leaderURL, p.followURL} {
		rev := call(t, "POST", base+"/v1/batch", batchBody(t,
			api.BatchOp{Op: api.BatchPut, Key: "a", Value: "va"},
			api.BatchOp{Op: api.BatchPut, Key: "b", ValueBase64: "AP8="},
			api.BatchOp{Op: api.BatchPut, Key: "x", Value: "2", PrevRevision: new(r1)},
		)).want(t, 200).num("revision")
		for key, value := range map[string]string{"a": "va", "x": "2"} {
			got := call(t, "GET", p.leaderURL+"/v1/kv/"+key, "").want(t, 200)
			if got.body["value"] != value || got.num("revision") != rev {
				t.Fatalf("%s after a batch at %d: %v", key, rev, got.body)
			}
		}
		if got := call(t, "GET", p.leaderURL+"/v1/kv/b", "").want(t, 200); got.body["value_base64"] != "AP8=" {
			t.Fatalf("b: %v", got.body)
		}
		// Undo it with a batch of deletes, so that the follower's turn
		// starts from the same state.
		call(t, "POST", base+"/v1/batch", batchBody(t,
			api.BatchOp{Op: api.BatchDelete, Key: "a"}, api.BatchOp{Op: api.BatchDelete, Key: "b", PrevRevision: new(rev)},
			api.BatchOp{Op: api.BatchPut, Key: "x", Value: "1"},
		)).want(t, 200)
		r1 = call(t, "GET", p.leaderURL+"/v1/kv/x", "").want(t, 200).num("revision")
	}
}

// TestAPIBatchRefusesBadInput: each malformed or oversized batch gets a
// clear 4xx naming what is wrong, and changes nothing.
func TestAPIBatchRefusesBadInput(t *testing.T) {
	p := newPair(t)
	rx := call(t, "PUT", p.leaderURL+"/v1/kv/x", "1").want(t, 200).num("revision")
	limits := DefaultLimits()
	big := strings.Repeat("v", limits.BatchBytes/2)
	var tooMany []api.BatchOp
	for i := range limits.BatchOps + 1 {
		tooMany = append(tooMany, api.BatchOp{Op: api.BatchPut, Key: fmt.Sprint("k", i)})
	}
	put := func(key, value string) api.BatchOp { return api.BatchOp{Op: api.BatchPut, Key: key, Value: value} }
	for _, tc := range []struct {
		name, body string
		code       int
		apiCode    api.Code
		says       string
	}{
		{"not JSON", "put a=1", 400, api.CodeInvalid, "batch body"},
		{"empty body", "", 400, api.CodeInvalid, "batch body"},
		{"unknown field", `{"ops":[],"atomic":true}`, 400, api.CodeInvalid, "unknown field"},
		{"trailing data", `{"ops":[{"op":"put","key":"a"}]} {}`, 400, api.CodeInvalid, "after the JSON"},
		{"trailing brace", `{"ops":[{"op":"put","key":"a"}]}}`, 400, api.CodeInvalid, "after the JSON"},
		{"trailing bracket", `{"ops":[{"op":"put","key":"a"}]}]`, 400, api.CodeInvalid, "after the JSON"},
		{"no ops", `{"ops":[]}`, 400, api.CodeInvalid, "empty batch"},
		{"unknown op", `{"ops":[{"op":"put","key":"a"},{"op":"append","key":"b"}]}`, 400, api.CodeInvalid, `batch op 1: op "append"`},
		{"op missing", `{"ops":[{"key":"b"}]}`, 400, api.CodeInvalid, `batch op 0: op ""`},
		{"empty key", batchBody(t, put("a", "1"), put("", "1")), 400, api.CodeInvalid, "batch op 1: empty key"},
		{"lone surrogate", `{"ops":[{"op":"put","key":"\ud800"}]}`, 400, api.CodeInvalid, "surrogate"},
		{"both values", `{"ops":[{"op":"put","key":"a","value":"1","value_base64":"AA=="}]}`, 400, api.CodeInvalid, "both value and value_base64"},
		{"bad base64", `{"ops":[{"op":"put","key":"a","value_base64":"%%%"}]}`, 400, api.CodeInvalid, "value_base64"},
		{"delete with value", `{"ops":[{"op":"delete","key":"x","value":"1"}]}`, 400, api.CodeInvalid, "a delete with a value"},
		{"duplicate key", batchBody(t, put("a", "1"), put("a", "2")), 400, api.CodeInvalid, `key "a" twice`},
		{"key too long", batchBody(t, put(strings.Repeat("k", limits.KeyBytes+1), "")), 400, api.CodeInvalid, "over the limit"},
		{"too many ops", batchBody(t, tooMany...), 400, api.CodeInvalid, fmt.Sprintf("over the limit of %d", limits.BatchOps)},
		{"too many bytes", batchBody(t, put("a", big), put("b", big), put("c", "1")), 400, api.CodeInvalid, fmt.Sprintf("over the limit of %d", limits.BatchBytes)},
		{"body too large", batchBody(t, put("a", strings.Repeat("v", int(bodyBytesMax("kv_batch", limits))))), 400, api.CodeInvalid, "too large"},
		{"conflict", batchBody(t, put("a", "1"), api.BatchOp{Op: api.BatchPut, Key: "x", PrevRevision: new(rx + 100)}), 409, api.CodeConflict, "batch op 1"},
		{"missing key", batchBody(t, put("a", "1"), api.BatchOp{Op: api.BatchDelete, Key: "none"}), 404, api.CodeNotFound, `key "none" not found`},
	} {
		for _, base := range []string{p.leaderURL, p.followURL} {
			r := call(t, "POST", base+"/v1/batch", tc.body)
			msg, _ := r.body["error"].(string)
			if r.code != tc.code || r.body["code"] != string(tc.apiCode) || !strings.Contains(msg, tc.says) {
				t.Errorf("%s: %d %v; want %d %s saying %q", tc.name, r.code, r.body, tc.code, tc.apiCode, tc.says)
			}
			switch tc.apiCode {
			case api.CodeConflict:
				if r.body["key"] != "x" || r.num("revision") != rx {
					t.Errorf("%s: body %v, want key x at revision %d", tc.name, r.body, rx)
				}
			case api.CodeNotFound:
				if r.body["key"] != "none" {
					t.Errorf("%s: body %v, want key none", tc.name, r.body)
				}
			}
		}
	}
	keys, _, _ := p.leader.m.Len()
	if keys != 1 {
		t.Fatalf("refused batches left %d keys, want 1 (x)", keys)
	}
	if got := call(t, "GET", p.leaderURL+"/v1/kv/x", "").want(t, 200); got.num("revision") != rx || got.body["value"] != "1" {
		t.Fatalf("x changed: %v", got.body)
	}
}

// TestAPIBatchWakesTheWatchOfEveryKey: a watch of each key a batch
// changes answers with the batch's revision; one of a key it does not
// change keeps waiting.
func TestAPIBatchWakesTheWatchOfEveryKey(t *testing.T) {
	f := newFake(1, 1)
	waiting := make(chan Watched, 16)
	srv := httptest.NewServer(NewAPI(signalWatches{f, waiting}, APIConfig{}))
	t.Cleanup(srv.Close)
	// Ends the watch of the untouched key, before the server closes.
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	r0 := call(t, "PUT", srv.URL+"/v1/kv/b", "0").want(t, 200).num("revision")
	type answer struct {
		key string
		r   reply
	}
	answers := make(chan answer, 3)
	for key, rev := range map[string]uint64{"a": 0, "b": r0, "untouched": 0} {
		go func() {
			url := fmt.Sprintf("%s/v1/watch/kv/%s?revision=%d&timeout_ms=60000", srv.URL, key, rev)
			req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				answers <- answer{key, reply{code: -1}}
				return
			}
			defer resp.Body.Close()
			var body map[string]any
			_ = json.NewDecoder(resp.Body).Decode(&body)
			answers <- answer{key, reply{code: resp.StatusCode, body: body}}
		}()
	}
	// Each watch took its key's channel before it looked at the key: the
	// batch's change closes it.
	for range 3 {
		select {
		case <-waiting:
		case <-time.After(30 * time.Second):
			t.Fatal("the watches did not start within 30s")
		}
	}
	rev := call(t, "POST", srv.URL+"/v1/batch", batchBody(t,
		api.BatchOp{Op: api.BatchPut, Key: "a", Value: "1"}, api.BatchOp{Op: api.BatchDelete, Key: "b"},
	)).want(t, 200).num("revision")
	got := map[string]reply{}
	for range 2 {
		select {
		case a := <-answers:
			got[a.key] = a.r
		case <-time.After(30 * time.Second):
			t.Fatalf("the batch at %d woke %d watches within 30s, want 2: %v", rev, len(got), got)
		}
	}
	if a := got["a"]; a.code != 200 || a.num("revision") != rev {
		t.Errorf("watch of a: %d %v, want revision %d", a.code, a.body, rev)
	}
	if b, ok := got["b"]; !ok || b.code != 404 {
		t.Errorf("watch of b (deleted): %d %v, want 404", b.code, b.body)
	}
	if _, woke := got["untouched"]; woke {
		t.Errorf("the watch of a key the batch did not change woke")
	}
}

// signalWatches is a fakeReplica that says on waiting each time a watch
// takes a key's channel.
type signalWatches struct {
	*fakeReplica
	waiting chan<- Watched
}

func (s signalWatches) ChangedOf(w Watched) <-chan struct{} {
	ch := s.fakeReplica.ChangedOf(w)
	s.waiting <- w
	return ch
}
