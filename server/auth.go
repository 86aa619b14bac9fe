package server

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"coord/api"
	"coord/internal/assert"
)

// Who may use which route, when the API checks tokens (APIConfig.Auth).
// A token is sent as "Authorization: Bearer TOKEN". No token, or one the
// cluster does not know: 401. A token whose role is too low, or whose
// prefix does not cover the key or lease: 403.

// Scopes a route's name parameter falls in, for the tokens' prefixes.
const (
	scopeKey   = "key"   // the {key} of the path, checked against KeyPrefix
	scopeLease = "lease" // the {name} of the path, checked against LeasePrefix
)

// access is what a route needs: a role (0: nothing, the route is public)
// and the scope of its name, if it has one.
type access struct {
	role  TokenRole
	scope string
}

// routeAccess is the route-role table. Every route the API serves has an
// entry (NewAPI checks): a new route must say who may use it.
var routeAccess = map[string]access{
	// The health check: a node's id, role, term, leader, indexes and its
	// members' addresses; no keys, values or leases.
	"status":        {},
	"kv_get":        {TokenRead, scopeKey},
	"kv_watch":      {TokenRead, scopeKey},
	"kv_put":        {TokenWrite, scopeKey},
	"kv_delete":     {TokenWrite, scopeKey},
	"kv_batch":      {TokenWrite, ""}, // each key's prefix: API.batch, Machine.authorize
	"lease_get":     {TokenRead, scopeLease},
	"lease_watch":   {TokenRead, scopeLease},
	"lease_acquire": {TokenWrite, scopeLease},
	"lease_renew":   {TokenWrite, scopeLease},
	"lease_release": {TokenWrite, scopeLease},
	"lease_session": {TokenWrite, scopeLease},
	"members":       {TokenRead, ""},
	"metrics":       {TokenRead, ""},
	"member_add":    {TokenAdmin, ""},
	"member_remove": {TokenAdmin, ""},
	"token_create":  {TokenAdmin, ""},
	"token_list":    {TokenAdmin, ""},
	"token_revoke":  {TokenAdmin, ""},
	// Probes and the page (health.go, ui.go): public, as status is; the
	// page's files hold no data, which it reads from the dashboard with
	// the user's token. pprof shows and costs much: admins only.
	"healthz":             {},
	"readyz":              {},
	"ui":                  {},
	"dashboard":           {TokenRead, ""},
	"dashboard_preflight": {},
	"pprof":               {TokenAdmin, ""},
}

func checkRoute(route string) {
	_, ok := routeAccess[route]
	assert.That(ok, "server: route %q has no entry in routeAccess", route)
}

// bearer returns the token of the Authorization header.
func bearer(r *http.Request) (string, error) {
	h := r.Header.Get(api.HeaderAuthorization)
	if h == "" {
		return "", unauthenticated("no token: send Authorization: Bearer TOKEN")
	}
	scheme, token, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(token) == "" {
		return "", unauthenticated("the Authorization header is not Bearer TOKEN")
	}
	return strings.TrimSpace(token), nil
}

func unauthenticated(msg string) *apiError {
	return fail(api.CodeUnauthenticated, msg)
}

func (a *API) lookupToken(hash [TokenHashBytes]byte) (t Token, ok bool) {
	a.replica.View(func(v View) { t, ok = v.Token(hash) })
	return t, ok
}

// guard checks the request's token against what route needs. It returns
// answered true if it answered the request itself: refused it (401, 403),
// or forwarded it to the leader. Otherwise tok is the request's token as
// this node knows it, for the checks a handler makes past the route's
// (handleWithToken); the zero Token without tokens, or on a route that
// needs none.
//
// A token this node does not know may be one made a moment ago that it
// has not applied yet: a follower forwards such a request to the leader,
// which looks again after a read barrier (so a token works on every node
// as soon as its creation was answered), and answers 401 only then.
func (a *API) guard(w http.ResponseWriter, r *http.Request, route string) (tok Token, answered bool) {
	need := routeAccess[route]
	if !a.cfg.Auth || need.role == 0 {
		return Token{}, false
	}
	secret, err := bearer(r)
	if err != nil {
		a.refuse(w, err)
		return Token{}, true
	}
	hash := HashToken(secret)
	tok, ok := a.lookupToken(hash)
	if !ok {
		switch {
		case r.Header.Get(api.HeaderForwarded) == "" && !a.leading():
			body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, bodyBytesMax(route, a.cfg.Limits)))
			if err == nil {
				err = a.forward(w, &request{Request: r, body: body})
			}
			if err != nil {
				a.writeError(w, err)
			}
			return Token{}, true
		case a.leading():
			if err := a.replica.ReadBarrier(r.Context()); err != nil {
				a.writeError(w, err)
				return Token{}, true
			}
			tok, ok = a.lookupToken(hash)
		}
	}
	if refusal := tokenRefusal(r, need, tok, ok); refusal != nil {
		a.writeRefusal(w, refusal)
		return Token{}, true
	}
	return tok, false
}

// tokenRefusal returns why a token (known: found in this node's state) may
// not do what need asks on r, or nil if it may.
func tokenRefusal(r *http.Request, need access, tok Token, known bool) *apiError {
	if !known {
		return unauthenticated("unknown or revoked token")
	}
	var name string
	switch need.scope {
	case scopeKey:
		name = r.PathValue("key")
	case scopeLease:
		name = r.PathValue("name")
	}
	if !tok.allows(need.role, need.scope, name) {
		return fail(api.CodePermissionDenied, denial(tok, need, name))
	}
	return nil
}

// recheckToken checks a linearizable read's token again once its read
// barrier has applied everything committed before the read began (API.read):
// a token revoked, or narrowed, before then reads nothing. It returns nil
// if the read may go on, or without tokens.
func (a *API) recheckToken(r *request) *apiError {
	need := routeAccess[r.route]
	if !a.cfg.Auth || need.role == 0 {
		return nil
	}
	secret, err := bearer(r.Request)
	if err != nil {
		var ae *apiError
		if errors.As(err, &ae) {
			return ae
		}
		return unauthenticated(err.Error())
	}
	tok, ok := a.lookupToken(HashToken(secret))
	return tokenRefusal(r.Request, need, tok, ok)
}

// writeRefusal answers a refused token: 401 with the Bearer challenge, or
// 403.
func (a *API) writeRefusal(w http.ResponseWriter, refusal *apiError) {
	if refusal.body.Code == api.CodeUnauthenticated {
		a.refuse(w, refusal)
		return
	}
	a.writeError(w, refusal)
}

func (a *API) refuse(w http.ResponseWriter, err error) {
	w.Header().Set(api.HeaderAuthenticate, api.BearerChallenge)
	a.writeError(w, err)
}

// denial says why tok may not do what need asks.
func denial(tok Token, need access, name string) string {
	if tok.Role < need.role {
		return fmt.Sprintf("token %d has role %s; this needs %s", tok.ID, tok.Role, need.role)
	}
	prefix := tok.KeyPrefix
	if need.scope == scopeLease {
		prefix = tok.LeasePrefix
	}
	return fmt.Sprintf("token %d is limited to %s names starting with %q, not %q", tok.ID, need.scope, prefix, name)
}

// guarded wraps a plain handler (metrics) with the token check.
func (a *API) guarded(route string, h http.Handler) http.Handler {
	checkRoute(route)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, answered := a.guard(w, r, route); answered {
			return
		}
		h.ServeHTTP(w, r)
	})
}

// errNoAuth refuses the tokens API on a node that checks no tokens.
var errNoAuth = fail(api.CodeInvalid, "this node runs with --insecure: it checks no tokens, so it makes none")

func (a *API) createToken(w http.ResponseWriter, r *request) error {
	if !a.cfg.Auth {
		return errNoAuth
	}
	tr, role, err := tokenRequest(r.body)
	if err != nil {
		return err
	}
	secret, err := NewTokenSecret()
	if err != nil {
		return err
	}
	tok := Token{Hash: HashToken(secret), Role: role, KeyPrefix: tr.KeyPrefix, LeasePrefix: tr.LeasePrefix, Name: tr.Name}
	return a.propose(w, r, TokenCreateCommand(tok), func(res Result) error {
		// A retry of a creation already applied gets that creation's
		// result, whose token is not the one made for this attempt.
		if got, ok := a.lookupToken(tok.Hash); !ok || got.ID != res.Revision {
			ae := fail(api.CodeConflict, fmt.Sprintf("this retry's first attempt made token %d, whose secret was in an answer that was lost: revoke it and make another", res.Revision))
			ae.body.ID = new(res.Revision)
			return ae
		}
		tok.ID = res.Revision
		return writeJSON(w, http.StatusOK, api.TokenResponse{Token: tok.apiToken(), Secret: secret})
	})
}

// tokenRequest decodes the body of POST /v1/tokens and its role. Like
// every body, it must be text JSON carries as it is (decodeStrict's
// checkJSONText): a prefix that encoding/json turned into U+FFFD would
// scope the token to other keys than asked.
func tokenRequest(body []byte) (api.TokenRequest, TokenRole, error) {
	var tr api.TokenRequest
	if err := decodeStrict(body, "token request body", &tr); err != nil {
		return tr, 0, err
	}
	role, err := ParseTokenRole(string(tr.Role))
	if err != nil {
		return tr, 0, fmt.Errorf("%w: role is required: read, write or admin", ErrInvalid)
	}
	return tr, role, nil
}

func (a *API) listTokens(w http.ResponseWriter, r *request) error {
	if !a.cfg.Auth {
		return errNoAuth
	}
	return a.read(w, r, func() error {
		out := api.TokensResponse{Tokens: []api.Token{}}
		a.replica.View(func(v View) {
			for _, t := range v.Tokens() {
				out.Tokens = append(out.Tokens, t.apiToken())
			}
		})
		return writeJSON(w, http.StatusOK, out)
	})
}

func (a *API) revokeToken(w http.ResponseWriter, r *request) error {
	if !a.cfg.Auth {
		return errNoAuth
	}
	id, err := strconv.ParseUint(r.PathValue("id"), 10, 64)
	if err != nil || id == 0 {
		return fmt.Errorf("%w: token id %q", ErrInvalid, r.PathValue("id"))
	}
	err = a.propose(w, r, TokenRevokeCommand(id), func(res Result) error {
		return writeJSON(w, http.StatusOK, api.WriteResponse{Revision: res.Revision})
	})
	var ae *apiError
	if errors.As(err, &ae) && ae.body.Code == api.CodeNotFound {
		return fail(api.CodeNotFound, fmt.Sprintf("no token %d", id))
	}
	return err
}
