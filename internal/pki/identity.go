package pki

import (
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
)

// ErrIdentity means a certificate names no coord identity, several, or
// one malformed, or one that is not the identity expected.
var ErrIdentity = errors.New("pki: certificate identity")

// ErrInvalid means an argument or a file is out of range or malformed.
var ErrInvalid = errors.New("pki: invalid")

// uriScheme is the scheme of identity URIs.
const uriScheme = "coord"

// Identity is who a certificate names: a node of a cluster (Node > 0) or
// a client of a cluster (Client not empty), never both.
type Identity struct {
	Cluster string
	Node    uint64
	Client  string
}

// NodeIdentity returns the identity of node id of cluster.
func NodeIdentity(cluster string, id uint64) Identity { return Identity{Cluster: cluster, Node: id} }

// ClientIdentity returns the identity of client name of cluster.
func ClientIdentity(cluster, name string) Identity { return Identity{Cluster: cluster, Client: name} }

// String returns the identity's URI.
func (id Identity) String() string { return id.URI().String() }

// URI returns the identity as the URI a certificate carries.
func (id Identity) URI() *url.URL {
	if id.Node != 0 {
		return &url.URL{Scheme: uriScheme, Host: id.Cluster, Path: "/node/" + strconv.FormatUint(id.Node, 10)}
	}
	return &url.URL{Scheme: uriScheme, Host: id.Cluster, Path: "/client/" + id.Client}
}

// Validate checks the cluster id and that the identity is a node or a
// client.
func (id Identity) Validate() error {
	if err := ValidateCluster(id.Cluster); err != nil {
		return err
	}
	switch {
	case id.Node != 0 && id.Client != "":
		return fmt.Errorf("%w: identity is both node %d and client %q", ErrInvalid, id.Node, id.Client)
	case id.Node == 0 && id.Client == "":
		return fmt.Errorf("%w: identity is neither a node nor a client", ErrInvalid)
	case id.Client != "" && !validName(id.Client):
		return fmt.Errorf("%w: client name %q: want 1 to 63 of [a-z0-9-]", ErrInvalid, id.Client)
	}
	return nil
}

// ValidateCluster checks a cluster id: 1 to 63 of [a-z0-9-].
func ValidateCluster(cluster string) error {
	if !validName(cluster) {
		return fmt.Errorf("%w: cluster id %q: want 1 to 63 of [a-z0-9-]", ErrInvalid, cluster)
	}
	return nil
}

func validName(s string) bool {
	if len(s) == 0 || len(s) > 63 {
		return false
	}
	for _, r := range s {
		if (r < 'a' || r > 'z') && (r < '0' || r > '9') && r != '-' {
			return false
		}
	}
	return true
}

// IdentityOf returns the identity a certificate names: its one coord://
// URI SAN. A certificate with none, with two, or with one that does not
// parse is ErrIdentity.
func IdentityOf(cert *x509.Certificate) (Identity, error) {
	var found []*url.URL
	for _, u := range cert.URIs {
		if u.Scheme == uriScheme {
			found = append(found, u)
		}
	}
	switch len(found) {
	case 0:
		return Identity{}, fmt.Errorf("%w: no %s:// URI in the certificate of %q", ErrIdentity, uriScheme, cert.Subject.CommonName)
	case 1:
	default:
		return Identity{}, fmt.Errorf("%w: %d %s:// URIs in one certificate", ErrIdentity, len(found), uriScheme)
	}
	return parseIdentity(found[0])
}

func parseIdentity(u *url.URL) (Identity, error) {
	bad := func(why string) (Identity, error) {
		return Identity{}, fmt.Errorf("%w: URI %q: %s", ErrIdentity, u.String(), why)
	}
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" || u.Port() != "" {
		return bad("unexpected user, port, query or fragment")
	}
	kind, name, ok := strings.Cut(strings.TrimPrefix(u.Path, "/"), "/")
	if !ok || strings.Contains(name, "/") {
		return bad("want coord://CLUSTER/node/ID or coord://CLUSTER/client/NAME")
	}
	var id Identity
	id.Cluster = u.Host
	switch kind {
	case "node":
		n, err := strconv.ParseUint(name, 10, 64)
		if err != nil || n == 0 || strconv.FormatUint(n, 10) != name {
			return bad("node id is not a positive integer")
		}
		id.Node = n
	case "client":
		id.Client = name
	default:
		return bad("kind " + strconv.Quote(kind) + ", want node or client")
	}
	if err := id.Validate(); err != nil {
		return bad(err.Error())
	}
	return id, nil
}
