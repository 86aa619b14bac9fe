package server

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"strings"

	"coord/api"
	"coord/internal/wire"
)

// TokenRole is what an API token may do. Each role includes the ones
// before it.
type TokenRole uint8

// The roles.
const (
	// TokenRead may read keys and leases, watch them, and read members
	// and metrics.
	TokenRead TokenRole = iota + 1
	// TokenWrite may also put, delete and compare-and-swap keys, and
	// acquire, renew and release leases.
	TokenWrite
	// TokenAdmin may also change the membership and make, list and
	// revoke tokens. An admin token is never limited to a prefix.
	TokenAdmin
)

var tokenRoleNames = [...]string{TokenRead: "read", TokenWrite: "write", TokenAdmin: "admin"}

// String returns the role's name: read, write or admin.
func (r TokenRole) String() string {
	if r.valid() {
		return tokenRoleNames[r]
	}
	return fmt.Sprintf("TokenRole(%d)", uint8(r))
}

func (r TokenRole) valid() bool { return r >= TokenRead && r <= TokenAdmin }

// ParseTokenRole parses read, write or admin. Errors wrap ErrInvalid.
func ParseTokenRole(s string) (TokenRole, error) {
	for r, name := range tokenRoleNames {
		if name != "" && name == s {
			return TokenRole(r), nil
		}
	}
	return 0, fmt.Errorf("%w: role %q: want read, write or admin", ErrInvalid, s)
}

// MarshalText implements encoding.TextMarshaler.
func (r TokenRole) MarshalText() ([]byte, error) {
	if !r.valid() {
		return nil, fmt.Errorf("%w: role %d", ErrInvalid, r)
	}
	return []byte(r.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (r *TokenRole) UnmarshalText(b []byte) error {
	v, err := ParseTokenRole(string(b))
	*r = v
	return err
}

// TokenHashBytes is the size of a token's hash (SHA-256).
const TokenHashBytes = sha256.Size

// Token is an API bearer token as the state machine holds it: never the
// token itself, only its SHA-256 hash. A token is 32 bytes from
// crypto/rand, so a fast hash is enough: no one can search a 256-bit
// space, and a slow key-derivation function (for passwords, which are
// guessable) would only slow every request down.
type Token struct {
	// ID is the log index of the command that made the token.
	ID   uint64
	Hash [TokenHashBytes]byte
	Role TokenRole
	// KeyPrefix and LeasePrefix, if not empty, limit the token to keys
	// and lease names that start with them.
	KeyPrefix   string
	LeasePrefix string
	// Name is a label for people ("ci", "billing-service").
	Name string
}

// apiToken returns the token as the API lists it: without its hash.
func (t Token) apiToken() api.Token {
	return api.Token{ID: t.ID, Role: api.TokenRole(t.Role.String()), KeyPrefix: t.KeyPrefix, LeasePrefix: t.LeasePrefix, Name: t.Name}
}

// tokenPrefix opens every token, so that one found in a log or a
// repository is recognizable.
const tokenPrefix = "coord_"

// NewTokenSecret returns a new random token: "coord_" and 32 bytes from
// crypto/rand in unpadded base64url.
func NewTokenSecret() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("server: token: %w", err)
	}
	return tokenPrefix + base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// HashToken returns the hash a token is stored and looked up by.
func HashToken(secret string) [TokenHashBytes]byte { return sha256.Sum256([]byte(secret)) }

// tokenVersion is the first byte of an encoded token (Command.Value of
// OpTokenCreate and OpTokenBootstrap).
const tokenVersion = 1

// marshal encodes what a create command carries: the token without its
// ID (the log index gives it).
func (t Token) marshal() []byte {
	e := wire.Encoder{}
	e.Byte(tokenVersion)
	e.Bytes(t.Hash[:])
	e.Byte(byte(t.Role))
	e.String(t.KeyPrefix)
	e.String(t.LeasePrefix)
	e.String(t.Name)
	return e.Buf
}

func unmarshalToken(b []byte) (Token, error) {
	d := wire.NewDecoder(b, ErrMalformed)
	var t Token
	if v := d.Byte("token version"); d.Err() == nil && v != tokenVersion {
		return t, fmt.Errorf("%w: token version %d", ErrMalformed, v)
	}
	hash := d.Bytes("token hash", TokenHashBytes)
	t.Role = TokenRole(d.Byte("token role"))
	t.KeyPrefix = d.String("key prefix", maxEncodedField)
	t.LeasePrefix = d.String("lease prefix", maxEncodedField)
	t.Name = d.String("token name", maxEncodedField)
	if err := d.Done(); err != nil {
		return t, fmt.Errorf("token: %w", err)
	}
	if len(hash) != TokenHashBytes {
		return t, fmt.Errorf("%w: token hash of %d bytes, want %d", ErrMalformed, len(hash), TokenHashBytes)
	}
	copy(t.Hash[:], hash)
	return t, nil
}

// TokenCreateCommand returns the command that adds t (its ID is ignored).
func TokenCreateCommand(t Token) Command { return Command{Op: OpTokenCreate, Value: t.marshal()} }

// TokenBootstrapCommand returns the command that adds t if the cluster
// never had a token.
func TokenBootstrapCommand(t Token) Command { return Command{Op: OpTokenBootstrap, Value: t.marshal()} }

// TokenRevokeCommand returns the command that removes token id.
func TokenRevokeCommand(id uint64) Command { return Command{Op: OpTokenRevoke, Token: id} }

// checkToken returns why t may not be stored, or "".
func (m *Machine) checkToken(t Token) string {
	switch {
	case !t.Role.valid():
		return fmt.Sprintf("token role %d", t.Role)
	case t.Role == TokenAdmin && (t.KeyPrefix != "" || t.LeasePrefix != ""):
		return "an admin token cannot be limited to a prefix (it could make itself an unlimited one)"
	case len(t.KeyPrefix) > m.limits.KeyBytes || len(t.LeasePrefix) > m.limits.KeyBytes || len(t.Name) > m.limits.KeyBytes:
		return fmt.Sprintf("token prefix or name over the limit of %d bytes", m.limits.KeyBytes)
	}
	if _, dup := m.tokenIDs[t.Hash]; dup {
		return "a token with this hash exists"
	}
	return ""
}

// executeToken applies a token command.
func (m *Machine) executeToken(index uint64, c Command) Result {
	if c.Op == OpTokenRevoke {
		t := m.tokens[c.Token]
		if t == nil {
			return Result{Status: StatusNotFound}
		}
		delete(m.tokenIDs, t.Hash)
		delete(m.tokens, t.ID)
		return Result{Revision: index}
	}
	t, err := unmarshalToken(c.Value)
	if err != nil {
		return Result{Status: StatusInvalid, Reason: err.Error()}
	}
	if reason := m.checkToken(t); reason != "" {
		return Result{Status: StatusInvalid, Reason: reason}
	}
	if c.Op == OpTokenBootstrap && m.tokensEver {
		// Tokens were made before (and maybe all revoked since): the
		// initial token must not come back.
		return Result{Status: StatusConflict, Reason: "the cluster has had tokens already"}
	}
	t.ID = index
	m.tokens[t.ID] = &t
	m.tokenIDs[t.Hash] = t.ID
	m.tokensEver = true
	return Result{Revision: index}
}

// TokenByHash returns the token whose hash is h, and whether there is one.
func (m *Machine) TokenByHash(h [TokenHashBytes]byte) (Token, bool) {
	id, ok := m.tokenIDs[h]
	if !ok {
		return Token{}, false
	}
	return *m.tokens[id], true
}

// Tokens returns every token, by ID.
func (m *Machine) Tokens() []Token {
	out := make([]Token, 0, len(m.tokens))
	for _, id := range sortedKeys(m.tokens) {
		out = append(out, *m.tokens[id])
	}
	return out
}

// TokensEver reports whether the cluster ever had a token (after which
// the initial admin token is never added again).
func (m *Machine) TokensEver() bool { return m.tokensEver }

// allows reports whether the token may act with role on a key (scope
// "key") or a lease name ("lease"), or on the cluster ("").
func (t Token) allows(role TokenRole, scope, name string) bool {
	if t.Role < role {
		return false
	}
	switch scope {
	case scopeKey:
		return strings.HasPrefix(name, t.KeyPrefix)
	case scopeLease:
		return strings.HasPrefix(name, t.LeasePrefix)
	}
	return true
}

// restoreTokens decodes the tokens section of a snapshot into m, a fresh
// machine.
func (m *Machine) restoreTokens(d *wire.Decoder) {
	m.tokensEver = d.Bool("tokens ever")
	// Against what is left of the snapshot, not Rest: a stream decoder
	// holds only what it has read ahead.
	for range d.Count("token count", int(min(d.Left(), maxCount))) {
		t := Token{ID: d.Uvarint("token id")}
		hash := d.Bytes("token hash", TokenHashBytes)
		t.Role = TokenRole(d.Byte("token role"))
		t.KeyPrefix = d.String("key prefix", maxEncodedField)
		t.LeasePrefix = d.String("lease prefix", maxEncodedField)
		t.Name = d.String("token name", maxEncodedField)
		if d.Err() != nil {
			return
		}
		if len(hash) != TokenHashBytes || !t.Role.valid() || t.ID == 0 {
			d.Fail(fmt.Sprintf("token %d: hash of %d bytes, role %d", t.ID, len(hash), t.Role))
			return
		}
		copy(t.Hash[:], hash)
		if _, dup := m.tokenIDs[t.Hash]; dup || m.tokens[t.ID] != nil {
			d.Fail(fmt.Sprintf("token %d twice", t.ID))
			return
		}
		m.tokens[t.ID] = &t
		m.tokenIDs[t.Hash] = t.ID
	}
}
