package api

import "fmt"

// TokenRole is what an API token may do. Each role includes the ones
// before it: read, write, admin.
type TokenRole string

// The roles.
const (
	// TokenRead may read keys and leases, watch them, and read members
	// and metrics.
	TokenRead TokenRole = "read"
	// TokenWrite may also write keys and acquire, renew and release
	// leases.
	TokenWrite TokenRole = "write"
	// TokenAdmin may also change the membership and make, list and
	// revoke tokens; it is never limited to a prefix.
	TokenAdmin TokenRole = "admin"
)

// ParseTokenRole parses read, write or admin.
func ParseTokenRole(s string) (TokenRole, error) {
	switch r := TokenRole(s); r {
	case TokenRead, TokenWrite, TokenAdmin:
		return r, nil
	}
	return "", fmt.Errorf("api: role %q: want read, write or admin", s)
}

// Token is an API token as the cluster lists it: never the token itself.
type Token struct {
	// ID is the log index of the command that made the token.
	ID   uint64    `json:"id"`
	Role TokenRole `json:"role"`
	// KeyPrefix and LeasePrefix, if not empty, limit the token to keys
	// and lease names that start with them.
	KeyPrefix   string `json:"key_prefix,omitempty"`
	LeasePrefix string `json:"lease_prefix,omitempty"`
	// Name is a label for people ("ci", "billing-service").
	Name string `json:"name,omitempty"`
}

// TokenRequest is the JSON body of POST /v1/auth/tokens.
type TokenRequest struct {
	Role        TokenRole `json:"role"`
	KeyPrefix   string    `json:"key_prefix,omitempty"`
	LeasePrefix string    `json:"lease_prefix,omitempty"`
	Name        string    `json:"name,omitempty"`
}

// TokenResponse is the JSON of a token made: the only time the token
// itself (Secret) is shown.
type TokenResponse struct {
	Token
	Secret string `json:"token"`
}

// TokensResponse is the answer to GET /v1/auth/tokens.
type TokensResponse struct {
	Tokens []Token `json:"tokens"`
}
