package server

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"io"
	"net/http"
	"strings"
	"testing"

	"coord/api"
	"coord/internal/wire"
)

func TestTokensCreateRevokeAndBootstrapOnce(t *testing.T) {
	a := newApplier(t)
	boot := Token{Hash: HashToken("boot"), Role: TokenAdmin}
	id := a.want(TokenBootstrapCommand(boot), StatusOK).Revision
	if got, ok := a.m.TokenByHash(boot.Hash); !ok || got.ID != id || got.Role != TokenAdmin {
		t.Fatalf("bootstrap token: %+v %v", got, ok)
	}
	// A second bootstrap (another leader's) adds nothing.
	a.want(TokenBootstrapCommand(Token{Hash: HashToken("other"), Role: TokenAdmin}), StatusConflict)
	reader := Token{Hash: HashToken("r"), Role: TokenRead, KeyPrefix: "app/", LeasePrefix: "app-", Name: "ci"}
	rid := a.want(TokenCreateCommand(reader), StatusOK).Revision
	a.want(TokenCreateCommand(reader), StatusInvalid) // the same hash twice
	a.want(TokenCreateCommand(Token{Hash: HashToken("x"), Role: TokenAdmin, KeyPrefix: "p"}), StatusInvalid)
	a.want(TokenCreateCommand(Token{Hash: HashToken("y"), Role: 9}), StatusInvalid)
	a.want(Command{Op: OpTokenCreate, Value: []byte{tokenVersion, 3, 1, 2, 3, 1, 0, 0, 0}}, StatusInvalid) // short hash
	a.want(Command{Op: OpTokenCreate, Value: []byte("junk")}, StatusInvalid)
	if toks := a.m.Tokens(); len(toks) != 2 || toks[1] != (Token{ID: rid, Hash: reader.Hash, Role: TokenRead, KeyPrefix: "app/", LeasePrefix: "app-", Name: "ci"}) {
		t.Fatalf("tokens %+v", toks)
	}
	a.want(TokenRevokeCommand(id), StatusOK)
	a.want(TokenRevokeCommand(id), StatusNotFound)
	if _, ok := a.m.TokenByHash(boot.Hash); ok {
		t.Fatal("a revoked token is still known")
	}
	// Every token revoked: the initial one still does not come back.
	a.want(TokenRevokeCommand(rid), StatusOK)
	a.want(TokenBootstrapCommand(boot), StatusConflict)
	if len(a.m.Tokens()) != 0 {
		t.Fatal("a bootstrap after revocations added a token")
	}
}

func TestSnapshotsKeepTokens(t *testing.T) {
	a := newApplier(t)
	a.want(TokenBootstrapCommand(Token{Hash: HashToken("boot"), Role: TokenAdmin}), StatusOK)
	a.want(TokenCreateCommand(Token{Hash: HashToken("w"), Role: TokenWrite, KeyPrefix: "k/"}), StatusOK)
	a.want(Command{Op: OpPut, Key: "k/1", Value: []byte("v")}, StatusOK)
	m := NewMachine(DefaultLimits())
	if err := m.Restore(a.m.Snapshot()); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(m.Tokens()) != fmt.Sprint(a.m.Tokens()) || !m.TokensEver() {
		t.Fatalf("restored tokens %+v, want %+v", m.Tokens(), a.m.Tokens())
	}
	if !bytes.Equal(m.Snapshot(), a.m.Snapshot()) {
		t.Fatal("a restored machine's snapshot differs")
	}
}

// A snapshot written before tokens existed ("coordsm1") restores, with no
// tokens, and a bootstrap then works.
func TestVersion1SnapshotsRestore(t *testing.T) {
	a := newApplier(t)
	a.want(Command{Op: OpPut, Key: "k", Value: []byte("v")}, StatusOK)
	snap := a.m.Snapshot()
	// Strip the tokens section (tokens ever: 0, count: 0) and the CRC,
	// and write the old magic and a new CRC.
	body := append([]byte(snapshotMagicV1), snap[len(snapshotMagic):len(snap)-4-2]...)
	v1 := binary.BigEndian.AppendUint32(body, crc32.Checksum(body, castagnoli))
	m := NewMachine(DefaultLimits())
	if err := m.Restore(v1); err != nil {
		t.Fatal(err)
	}
	if kv, ok := m.Get("k"); !ok || string(kv.Value) != "v" || m.TokensEver() {
		t.Fatalf("restored %+v %v, tokens ever %v", kv, ok, m.TokensEver())
	}
	if r := m.Apply(10, TokenBootstrapCommand(Token{Hash: HashToken("b"), Role: TokenAdmin}).Marshal()); r.Status != StatusOK {
		t.Fatalf("bootstrap after a v1 restore: %+v", r)
	}
}

func TestRestoreRefusesBadTokens(t *testing.T) {
	good := NewMachine(DefaultLimits())
	good.Apply(1, TokenCreateCommand(Token{Hash: HashToken("a"), Role: TokenRead}).Marshal())
	snap := good.Snapshot()
	for name, mutate := range map[string]func(e *wire.Encoder){
		"role 0": func(e *wire.Encoder) {
			e.Bool(true)
			e.Uvarint(1)
			e.Uvarint(1)
			e.Bytes(make([]byte, TokenHashBytes))
			e.Byte(0)
			e.String("")
			e.String("")
			e.String("")
		},
		"short hash": func(e *wire.Encoder) {
			e.Bool(true)
			e.Uvarint(1)
			e.Uvarint(1)
			e.Bytes([]byte{1, 2})
			e.Byte(1)
			e.String("")
			e.String("")
			e.String("")
		},
		"twice": func(e *wire.Encoder) {
			e.Bool(true)
			e.Uvarint(2)
			for range 2 {
				e.Uvarint(1)
				e.Bytes(make([]byte, TokenHashBytes))
				e.Byte(1)
				e.String("")
				e.String("")
				e.String("")
			}
		},
	} {
		// Everything before the tokens section of an empty machine, then
		// the bad section.
		empty := NewMachine(DefaultLimits()).Snapshot()
		e := wire.Encoder{Buf: bytes.Clone(empty[:len(empty)-4-2])}
		mutate(&e)
		data := binary.BigEndian.AppendUint32(e.Buf, crc32.Checksum(e.Buf, castagnoli))
		m := NewMachine(DefaultLimits())
		if err := m.Restore(data); err == nil {
			t.Errorf("%s: restored", name)
		}
	}
	if err := NewMachine(DefaultLimits()).Restore(snap); err != nil {
		t.Fatal(err)
	}
}

// authPair is a leader and a follower API that check tokens, and tokens
// of every kind made on the leader (the follower's fake never learns
// them: it forwards what it does not know).
type authPair struct {
	*pair
	tokens map[string]string // kind -> secret
}

func newAuthPair(t *testing.T) *authPair {
	p := newPairOf(t, APIConfig{Metrics: NewMetrics(), Auth: true, Pprof: true}, APIConfig{Metrics: NewMetrics(), Auth: true, Pprof: true})
	ap := &authPair{pair: p, tokens: map[string]string{}}
	for kind, tok := range map[string]Token{
		"admin":        {Role: TokenAdmin},
		"write":        {Role: TokenWrite},
		"read":         {Role: TokenRead},
		"write-app":    {Role: TokenWrite, KeyPrefix: "app/", LeasePrefix: "app-"},
		"read-app":     {Role: TokenRead, KeyPrefix: "app/", LeasePrefix: "app-"},
		"write-revoke": {Role: TokenWrite},
	} {
		secret, err := NewTokenSecret()
		if err != nil {
			t.Fatal(err)
		}
		tok.Hash = HashToken(secret)
		if r, err := p.leader.Propose(context.Background(), TokenCreateCommand(tok)); err != nil || r.Status != StatusOK {
			t.Fatalf("token %s: %+v %v", kind, r, err)
		}
		ap.tokens[kind] = secret
	}
	return ap
}

// as calls with the token of kind ("" for none, "bogus" for one the
// cluster never made).
func (p *authPair) as(t *testing.T, kind, method, url, body string) reply {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	switch kind {
	case "":
	case "bogus":
		req.Header.Set("Authorization", "Bearer coord_"+strings.Repeat("x", 43))
	default:
		req.Header.Set("Authorization", "Bearer "+p.tokens[kind])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return reply{code: resp.StatusCode, header: resp.Header, body: decodeBody(raw)}
}

func decodeBody(raw []byte) map[string]any {
	var m map[string]any
	_ = json.Unmarshal(raw, &m)
	return m
}

// TestAPITokenChecksForEveryRoute asks every route, on the leader and
// through the follower, with no token, an unknown one, and one of each
// role and prefix: 401, 403, or served.
func TestAPITokenChecksForEveryRoute(t *testing.T) {
	p := newAuthPair(t)
	routes := []struct {
		route, method, path, body string
	}{
		{"status", "GET", "/v1/status", ""},
		{"kv_get", "GET", "/v1/kv/%s/x", ""},
		{"kv_watch", "GET", "/v1/watch/kv/%s/x?timeout_ms=1", ""},
		{"kv_put", "PUT", "/v1/kv/%s/x", "v"},
		{"kv_delete", "DELETE", "/v1/kv/%s/x", ""},
		{"kv_batch", "POST", "/v1/batch", `{"ops":[{"op":"put","key":"%s/x","value":"v"}]}`},
		{"lease_get", "GET", "/v1/leases/%s-l", ""},
		{"lease_watch", "GET", "/v1/watch/leases/%s-l?timeout_ms=1", ""},
		{"lease_acquire", "POST", "/v1/leases/%s-l/acquire", `{"holder":"h","ttl_ms":1000}`},
		{"lease_renew", "POST", "/v1/leases/%s-l/renew", `{"holder":"h","token":1}`},
		{"lease_release", "POST", "/v1/leases/%s-l/release", `{"holder":"h","token":1}`},
		{"lease_session", "GET", "/v1/leases/%s-l/session?token=1&holder=h", ""},
		{"members", "GET", "/v1/members", ""},
		{"metrics", "GET", "/metrics", ""},
		{"member_add", "POST", "/v1/members", `{"id":9,"peer":"127.0.0.1:1"}`},
		{"member_remove", "DELETE", "/v1/members/9", ""},
		{"token_list", "GET", "/v1/auth/tokens", ""},
		{"token_create", "POST", "/v1/auth/tokens", `{"role":"read"}`},
		{"token_revoke", "DELETE", "/v1/auth/tokens/99999", ""},
		{"healthz", "GET", "/healthz", ""},
		{"readyz", "GET", "/readyz", ""},
		{"ui", "GET", "/ui/", ""},
		{"dashboard", "GET", "/v1/dashboard", ""},
		{"dashboard_preflight", "OPTIONS", "/v1/dashboard", ""},
		{"pprof", "GET", "/debug/pprof/cmdline", ""},
	}
	covered := map[string]bool{}
	for _, rt := range routes {
		covered[rt.route] = true
		need := routeAccess[rt.route]
		for _, kind := range []string{"", "bogus", "read", "write", "admin", "read-app", "write-app"} {
			for _, prefix := range []string{"app", "other"} {
				for _, base := range []string{p.leaderURL, p.followURL} {
					path := rt.path
					if strings.Contains(path, "%s") {
						path = fmt.Sprintf(path, prefix)
					}
					body := rt.body
					scope := need.scope
					if rt.route == "kv_batch" { // its key is in the body
						body, scope = fmt.Sprintf(body, prefix), scopeKey
					}
					r := p.as(t, kind, rt.method, base+path, body)
					name := prefix + "/x" // the {key} of the kv routes
					if need.scope == scopeLease {
						name = prefix + "-l"
					}
					want := "served"
					switch {
					case need.role == 0:
					case kind == "" || kind == "bogus":
						want = "401"
					case !tokenFor(kind).allows(need.role, scope, name):
						want = "403"
					}
					got := "served"
					if r.code == 401 || r.code == 403 {
						got = fmt.Sprint(r.code)
					}
					if got != want {
						t.Errorf("%s %s as %q: %d %v; want %s", rt.method, base+path, kind, r.code, r.body, want)
					}
					if r.code == 401 && r.header.Get("WWW-Authenticate") == "" {
						t.Errorf("%s %s: 401 without WWW-Authenticate", rt.method, path)
					}
					if r.code == 403 && (r.body["code"] != "permission_denied" || r.body["error"] == "") {
						t.Errorf("%s %s: 403 body %v", rt.method, path, r.body)
					}
				}
			}
		}
	}
	for route := range routeAccess {
		if !covered[route] {
			t.Errorf("route %s is not tested", route)
		}
	}
}

// tokenFor is the Token newAuthPair made for kind, without its hash.
func tokenFor(kind string) Token {
	switch kind {
	case "admin":
		return Token{Role: TokenAdmin}
	case "write", "write-revoke":
		return Token{Role: TokenWrite}
	case "read":
		return Token{Role: TokenRead}
	case "write-app":
		return Token{Role: TokenWrite, KeyPrefix: "app/", LeasePrefix: "app-"}
	case "read-app":
		return Token{Role: TokenRead, KeyPrefix: "app/", LeasePrefix: "app-"}
	}
	return Token{}
}

func TestAPITokensCreateListRevoke(t *testing.T) {
	p := newAuthPair(t)
	made := p.as(t, "admin", "POST", p.followURL+"/v1/auth/tokens", `{"role":"write","key_prefix":"svc/","name":"svc"}`).want(t, 200)
	secret, _ := made.body["token"].(string)
	id := made.num("id")
	if !strings.HasPrefix(secret, tokenPrefix) || len(secret) != len(tokenPrefix)+43 || id == 0 || made.body["role"] != "write" {
		t.Fatalf("made %v", made.body)
	}
	p.tokens["svc"] = secret
	p.as(t, "svc", "PUT", p.followURL+"/v1/kv/svc/a", "v").want(t, 200)
	p.as(t, "svc", "PUT", p.followURL+"/v1/kv/other", "v").want(t, 403)
	list := p.as(t, "admin", "GET", p.leaderURL+"/v1/auth/tokens", "").want(t, 200)
	raw := fmt.Sprint(list.body)
	if !strings.Contains(raw, "svc/") || strings.Contains(raw, secret) {
		t.Fatalf("list %v", list.body)
	}
	for _, tok := range list.body["tokens"].([]any) {
		if _, has := tok.(map[string]any)["hash"]; has {
			t.Fatalf("list shows a hash: %v", tok)
		}
	}
	p.as(t, "admin", "DELETE", fmt.Sprintf("%s/v1/auth/tokens/%d", p.followURL, id), "").want(t, 200)
	p.as(t, "svc", "PUT", p.followURL+"/v1/kv/svc/a", "v").want(t, 401)
	p.as(t, "svc", "PUT", p.leaderURL+"/v1/kv/svc/a", "v").want(t, 401)
	p.as(t, "admin", "DELETE", fmt.Sprintf("%s/v1/auth/tokens/%d", p.leaderURL, id), "").want(t, 404)
	for _, body := range []string{`{}`, `{"role":"root"}`, `{"role":"admin","key_prefix":"a"}`, `{"role":"read","x":1}`, `nope`} {
		if r := p.as(t, "admin", "POST", p.leaderURL+"/v1/auth/tokens", body); r.code != 400 {
			t.Errorf("create %s: %d %v, want 400", body, r.code, r.body)
		}
	}
}

// A retry of a creation whose answer was lost cannot hand out the token
// made then: it says which token was made, for revocation.
func TestAPITokenCreateRetryIsAConflict(t *testing.T) {
	p := newAuthPair(t)
	u := p.leaderURL + "/v1/auth/tokens?client_id=5&seq=1"
	first := p.as(t, "admin", "POST", u, `{"role":"read"}`).want(t, 200)
	again := p.as(t, "admin", "POST", u, `{"role":"read"}`).want(t, 409)
	if again.num("id") != first.num("id") {
		t.Fatalf("retry %v, first %v", again.body, first.body)
	}
}

func TestAPIInsecureMakesNoTokens(t *testing.T) {
	p := newPair(t)
	call(t, "POST", p.leaderURL+"/v1/auth/tokens", `{"role":"read"}`).want(t, 400)
	call(t, "PUT", p.leaderURL+"/v1/kv/k", "v").want(t, 200) // and checks none
}

// A linearizable read checks its token again after its read barrier (the
// ReadIndex round through which a node, leader or follower, applies what
// was committed before the read began): a revocation committed before the
// read began refuses it, even where the guard still saw the token. Here
// the fake's barrier applies the revocation, as a follower's read index
// round applies one the leader committed but the follower had not applied.
func TestAPIReadChecksTheTokenAfterTheReadBarrier(t *testing.T) {
	p := newAuthPair(t)
	p.as(t, "write-revoke", "GET", p.leaderURL+"/v1/kv/k", "").want(t, http.StatusNotFound)
	var id uint64
	p.leader.View(func(v View) {
		tok, _ := v.Token(HashToken(p.tokens["write-revoke"]))
		id = tok.ID
	})
	p.leader.mu.Lock()
	p.leader.barrier = func() {
		if r, err := p.leader.Propose(context.Background(), TokenRevokeCommand(id)); err != nil || r.Status != StatusOK {
			t.Errorf("revoke: %+v %v", r, err)
		}
	}
	p.leader.mu.Unlock()
	r := p.as(t, "write-revoke", "GET", p.leaderURL+"/v1/kv/k", "").want(t, http.StatusUnauthorized)
	if r.header.Get(api.HeaderAuthenticate) == "" {
		t.Fatalf("401 without the Bearer challenge: %v", r.header)
	}
	// A token narrowed to other keys is refused after the barrier too: the
	// same check as the guard's, on the state the barrier applied.
	p.leader.mu.Lock()
	p.leader.barrier = nil
	p.leader.mu.Unlock()
	p.as(t, "read-app", "GET", p.leaderURL+"/v1/kv/other", "").want(t, http.StatusForbidden)
}
