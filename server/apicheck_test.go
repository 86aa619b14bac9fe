package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"
)

// The outsider's ttl_ms values: unchecked, the multiplication by a
// millisecond overflowed, and the first was granted as a 1,448 ms lease,
// the second as 0. Each is refused before anything is proposed; the largest
// allowed TTL is granted exactly.
func TestAPIRejectsTTLOutOfRange(t *testing.T) {
	p := newPair(t)
	u := p.leaderURL + "/v1/leases/ttl"
	for _, ttl := range []string{"18446744073711000", "18446744073710", "3600001", "-1", "9223372036854775807", "18446744073709551616", "1e3", "5000.5"} {
		r := call(t, "POST", u+"/acquire", `{"holder":"a","ttl_ms":`+ttl+`}`)
		if r.code != 400 || r.body["code"] != "invalid" {
			t.Errorf("acquire with ttl_ms %s: %d %v, want 400 invalid", ttl, r.code, r.body)
		}
	}
	if applied := p.leader.Status().Applied; applied != 0 {
		t.Fatalf("%d commands applied after refused acquires", applied)
	}
	a := call(t, "POST", u+"/acquire", `{"holder":"a","ttl_ms":3600000}`).want(t, 200)
	if a.num("ttl_ms") != 3600000 {
		t.Fatalf("acquire for the maximum TTL: %v", a.body)
	}
	token := a.num("token")
	renew := fmt.Sprintf(`{"holder":"a","token":%d,"ttl_ms":18446744073711000}`, token)
	call(t, "POST", u+"/renew", renew).want(t, 400)
	if g := call(t, "GET", u, "").want(t, 200); g.num("ttl_ms") != 3600000 {
		t.Fatalf("a refused renew changed the lease: %v", g.body)
	}
}

func TestTTLFromMs(t *testing.T) {
	for _, c := range []struct {
		ms   int64
		want time.Duration
		ok   bool
	}{
		{0, 0, true},
		{1, time.Millisecond, true},
		{3600000, time.Hour, true},
		{3600001, 0, false},
		{-1, 0, false},
		{18446744073711000, 0, false},
		{1<<63 - 1, 0, false},
	} {
		got, err := ttlFromMs(c.ms, time.Hour)
		if got != c.want || (err == nil) != c.ok || (err != nil && !errors.Is(err, ErrInvalid)) {
			t.Errorf("ttlFromMs(%d): %v, %v; want %v, ok %v", c.ms, got, err, c.want, c.ok)
		}
	}
}

// A timeout_ms too large to multiply by a millisecond waits the maximum,
// as documented, rather than overflowing into a negative wait that
// answered at once.
func TestWatchTimeoutNeverOverflows(t *testing.T) {
	for _, c := range []struct {
		ms   uint64
		has  bool
		want time.Duration
	}{
		{0, false, watchTimeoutDefault},
		{0, true, 0},
		{50, true, 50 * time.Millisecond},
		{uint64(watchTimeoutMax/time.Millisecond) - 1, true, watchTimeoutMax - time.Millisecond},
		{uint64(watchTimeoutMax / time.Millisecond), true, watchTimeoutMax},
		{18446744073709551, true, watchTimeoutMax},
		{9223372036855, true, watchTimeoutMax},
		{1<<64 - 1, true, watchTimeoutMax},
	} {
		if got := watchTimeout(c.ms, c.has); got != c.want {
			t.Errorf("watchTimeout(%d, %v) = %v, want %v", c.ms, c.has, got, c.want)
		}
	}
}

// Keys, lease names and holders that are not valid UTF-8 are refused:
// JSON carries only text, so they would come back as U+FFFD and two of them
// would look the same. Valid UTF-8, U+FFFD itself included, is accepted.
func TestAPIRejectsInvalidUTF8(t *testing.T) {
	p := newPair(t)
	for _, c := range []struct{ method, path, body string }{
		{"PUT", "/v1/kv/%FF", "v"},
		{"PUT", "/v1/kv/a%C3", "v"},
		{"PUT", "/v1/kv/%ED%A0%80", "v"}, // a surrogate, encoded in UTF-8 form
		{"GET", "/v1/kv/%FF", ""},
		{"GET", "/v1/kv/%FF?stale=true", ""},
		{"DELETE", "/v1/kv/%FE", ""},
		{"GET", "/v1/watch/kv/%FF?timeout_ms=1", ""},
		{"GET", "/v1/leases/%FF", ""},
		{"GET", "/v1/watch/leases/%FF?timeout_ms=1", ""},
		{"POST", "/v1/leases/%FF/acquire", `{"holder":"a","ttl_ms":1000}`},
		{"POST", "/v1/leases/L/acquire", "{\"holder\":\"a\xff\",\"ttl_ms\":1000}"},
		{"POST", "/v1/leases/L/acquire", `{"holder":"\ud800","ttl_ms":1000}`},
		{"POST", "/v1/leases/L/acquire", `{"holder":"\udc00x","ttl_ms":1000}`},
		{"POST", "/v1/leases/L/acquire", `{"holder":"\uD800\u0041","ttl_ms":1000}`},
		{"POST", "/v1/leases/L/renew", `{"holder":"\ud800","token":1}`},
		{"POST", "/v1/members", `{"id":4,"peer":"\ud800"}`},
	} {
		// Through the follower too: it must refuse, not forward.
		for _, base := range []string{p.leaderURL, p.followURL} {
			r := call(t, c.method, base+c.path, c.body)
			if r.code != 400 || r.body["code"] != "invalid" {
				t.Errorf("%s %s %q: %d %v, want 400 invalid", c.method, c.path, c.body, r.code, r.body)
			}
		}
	}
	if applied := p.leader.Status().Applied; applied != 0 {
		t.Fatalf("%d commands applied after refused requests", applied)
	}
	call(t, "PUT", p.leaderURL+"/v1/kv/caf%C3%A9", "v").want(t, 200)
	if g := call(t, "GET", p.leaderURL+"/v1/kv/caf%C3%A9", "").want(t, 200); g.body["key"] != "café" {
		t.Fatalf("key %v", g.body["key"])
	}
	for i, holder := range []string{`\u00e9`, `\ud83d\ude00`, "\ufffd", `\ufffd`, `\\ud800`} {
		name := fmt.Sprintf("/v1/leases/ok%d", i)
		a := call(t, "POST", p.leaderURL+name+"/acquire", `{"holder":"`+holder+`","ttl_ms":1000}`).want(t, 200)
		var want string
		if err := json.Unmarshal([]byte(`"`+holder+`"`), &want); err != nil || a.body["holder"] != want {
			t.Errorf("holder %s: got %q, want %q (%v)", holder, a.body["holder"], want, err)
		}
	}
}

func TestCheckJSONText(t *testing.T) {
	for _, c := range []struct {
		body string
		ok   bool
	}{
		{`{"a":"plain"}`, true},
		{`{"a":"caf\u00e9 café"}`, true},
		{`{"a":"\ud83d\ude00"}`, true},
		{`{"a":"\uD83D\uDE00"}`, true},
		{`{"a":"\\ud800"}`, true},           // an escaped backslash, then text
		{`{"a":"\\\ud83d\ude00"}`, true},    // an escaped backslash, then a pair
		{"{\"a\":\"\ufffd\"}", true},        // U+FFFD itself is a character
		{`{"a":"\u12"}`, true},              // a syntax error, left to the decoder
		{"{\"a\":\"\xff\"}", false},         // not UTF-8
		{"{\"a\":\"\xed\xa0\x80\"}", false}, // a surrogate in UTF-8 form
		{`{"a":"\ud800"}`, false},
		{`{"a":"\udfff"}`, false},
		{`{"a":"\ud800\ud800"}`, false},
		{`{"a":"\ud800\u0041"}`, false},
		{`{"a":"\ud800x"}`, false},
		{`{"a":"x\\\ud800"}`, false},
		{`"\ud800`, false},
	} {
		err := checkJSONText([]byte(c.body))
		if (err == nil) != c.ok || (err != nil && !errors.Is(err, ErrInvalid)) {
			t.Errorf("checkJSONText(%q): %v, want ok %v", c.body, err, c.ok)
		}
	}
}
