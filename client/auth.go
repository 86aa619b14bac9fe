package client

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	"coord/api"
)

// TokenSpec is what a token may do: its role, and the key and lease-name
// prefixes it is limited to ("" for none).
type TokenSpec struct {
	Role        api.TokenRole
	KeyPrefix   string
	LeasePrefix string
	// Name is a label for people.
	Name string
}

// CreateToken makes a token (an admin token's call). The token itself
// (Secret) is in this answer only: the cluster keeps its hash. A write
// retried after a lost answer can get ErrConflict naming the token the
// first attempt made (revoke it and create another).
func (c *Client) CreateToken(ctx context.Context, spec TokenSpec) (api.TokenResponse, error) {
	if spec.Role == "" {
		return api.TokenResponse{}, fmt.Errorf("%w: a token needs a role", ErrInvalid)
	}
	body, err := json.Marshal(api.TokenRequest{Role: spec.Role, KeyPrefix: spec.KeyPrefix, LeasePrefix: spec.LeasePrefix, Name: spec.Name})
	if err != nil {
		return api.TokenResponse{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	var out api.TokenResponse
	err = c.do(ctx, call{method: "POST", path: "/v1/auth/tokens", body: body, write: true}, &out)
	return out, err
}

// Tokens lists the cluster's tokens (an admin token's call): IDs, roles,
// prefixes and names, never the tokens.
func (c *Client) Tokens(ctx context.Context) ([]api.Token, error) {
	var out api.TokensResponse
	err := c.do(ctx, call{method: "GET", path: "/v1/auth/tokens"}, &out)
	return out.Tokens, err
}

// RevokeToken revokes token id (an admin token's call) and returns the
// revision of the revocation: every node refuses the token once it has
// applied that revision. ErrNotFound if there is no such token.
func (c *Client) RevokeToken(ctx context.Context, id uint64) (uint64, error) {
	if id == 0 {
		return 0, fmt.Errorf("%w: token id 0", ErrInvalid)
	}
	var out api.WriteResponse
	err := c.do(ctx, call{method: "DELETE", path: "/v1/auth/tokens/" + strconv.FormatUint(id, 10), write: true}, &out)
	return out.Revision, err
}
