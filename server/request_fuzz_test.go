package server

import (
	"encoding/json"
	"errors"
	"testing"
)

// FuzzLeaseRequest feeds a client's JSON body of a lease's acquire, renew
// or release to leaseRequest: never a panic, errors wrap ErrInvalid, and
// a request it accepts names a holder and comes back the same from its
// own JSON.
func FuzzLeaseRequest(f *testing.F) {
	f.Add([]byte(`{"holder":"node-1","ttl_ms":2000}`))
	f.Add([]byte(`{"holder":"node-1","token":12}`))
	f.Add([]byte(`{"holder":""}`))
	f.Add([]byte(`{"holder":"a","extra":1}`))
	f.Add([]byte(`{"holder":"\ud800"}`))
	f.Add([]byte("{\"holder\":\"\xff\"}"))
	f.Add([]byte(`{"holder":"a","ttl_ms":-1}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		lr, err := leaseRequest(&request{body: body})
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v does not wrap ErrInvalid", err)
			}
			return
		}
		if lr.Holder == "" {
			t.Fatalf("accepted %q without a holder", body)
		}
		again, err := leaseRequest(&request{body: mustJSON(t, lr)})
		if err != nil || again != lr {
			t.Fatalf("%+v through its own JSON: %+v, %v", lr, again, err)
		}
	})
}

// FuzzTokenRequest feeds an admin's JSON body of POST /v1/tokens to
// tokenRequest: never a panic, errors wrap ErrInvalid, and a request it
// accepts has a role and comes back the same from its own JSON (so its
// prefixes are the ones asked for, not text encoding/json replaced).
func FuzzTokenRequest(f *testing.F) {
	f.Add([]byte(`{"role":"write","key_prefix":"app/","lease_prefix":"app-","name":"deployer"}`))
	f.Add([]byte(`{"role":"admin"}`))
	f.Add([]byte(`{"role":"root"}`))
	f.Add([]byte(`{"key_prefix":"a"}`))
	f.Add([]byte(`{"role":"read","key_prefix":"a\udc00"}`))
	f.Add([]byte("{\"role\":\"read\",\"key_prefix\":\"a\xff\"}"))
	f.Add([]byte(`{"role":"read","scope":"all"}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		tr, role, err := tokenRequest(body)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v does not wrap ErrInvalid", err)
			}
			return
		}
		again, againRole, err := tokenRequest(mustJSON(t, tr))
		if err != nil || again != tr || againRole != role {
			t.Fatalf("%+v (%v) through its own JSON: %+v (%v), %v", tr, role, again, againRole, err)
		}
	})
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The token API refuses a body whose text JSON cannot carry as it is,
// as the other APIs do: encoding/json would read "a\xff" as "a\ufffd"
// and scope the token to other keys than asked.
func TestTokenRequestRefusesTextJSONCannotCarry(t *testing.T) {
	for _, body := range []string{"{\"role\":\"read\",\"key_prefix\":\"a\xff\"}", `{"role":"read","lease_prefix":"\ud800"}`} {
		if _, _, err := tokenRequest([]byte(body)); !errors.Is(err, ErrInvalid) {
			t.Fatalf("token request %q: %v, want ErrInvalid", body, err)
		}
	}
	if _, _, err := tokenRequest([]byte(`{"role":"read","key_prefix":"caf\u00e9/"}`)); err != nil {
		t.Fatalf("a valid token request: %v", err)
	}
}
