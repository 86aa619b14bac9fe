package localcluster

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"coord/api"
	"coord/client"
	"coord/internal/pki"
	"coord/server"
)

// TLSDir is the directory, in a secure cluster's Dir, of its CA, its
// certificates and its admin token; every file in it is mode 0600.
//
//	ca.crt, ca.key          the cluster's CA (the key issues node certificates)
//	node-N.crt, node-N.key  node N's certificate: peer transport and HTTPS,
//	                        naming coord://CLUSTER/node/N, 127.0.0.1 and localhost
//	client.crt, client.key  a client certificate, coord://CLUSTER/client/admin
//	admin.token             the initial admin token
const TLSDir = "tls"

// Security describes a secure cluster's files, as cluster.json records
// them for the commands that reach the cluster later.
type Security struct {
	// Cluster is the cluster id its certificates name.
	Cluster string `json:"cluster"`
	// CA, Cert, Key and TokenFile are the paths of the CA certificate, the
	// client certificate and key, and the admin token.
	CA        string `json:"ca"`
	Cert      string `json:"cert"`
	Key       string `json:"key"`
	TokenFile string `json:"token_file"`
	// CAKey is the CA's private key, to issue the certificates of nodes
	// added later.
	CAKey string `json:"ca_key"`
}

// Access is what a client needs to reach a cluster's API: a TLS
// configuration and a token, both zero for an insecure cluster.
type Access struct {
	TLS   *tls.Config
	Token string

	http *http.Client // for StatusOf; nil: http.DefaultClient
}

// NewAccess returns the Access of a TLS configuration and a token.
func NewAccess(conf *tls.Config, token string) Access {
	a := Access{TLS: conf, Token: token}
	if conf != nil {
		a.http = &http.Client{Transport: &http.Transport{TLSClientConfig: conf, MaxIdleConnsPerHost: 4, IdleConnTimeout: 10 * time.Second}}
	}
	return a
}

// ClientConfig returns a client configuration for endpoints with a's TLS
// and token.
func (a Access) ClientConfig(endpoints ...string) client.Config {
	cfg := client.DefaultConfig(endpoints...)
	cfg.TLS, cfg.Token = a.TLS, a.Token
	return cfg
}

// Load reads the files of s into an Access; an insecure cluster (s nil)
// gives the zero Access.
func (s *Security) Load() (Access, error) {
	if s == nil {
		return Access{}, nil
	}
	conf, err := pki.LoadClientConfig(s.CA, s.Cert, s.Key)
	if err != nil {
		return Access{}, fmt.Errorf("localcluster: %w", err)
	}
	tok, err := os.ReadFile(s.TokenFile)
	if err != nil {
		return Access{}, fmt.Errorf("localcluster: admin token: %w", err)
	}
	return NewAccess(conf, strings.TrimSpace(string(tok))), nil
}

// newSecurity makes a secure cluster's CA, client certificate and admin
// token in dir/tls, for cluster (the nodes' --cluster-id).
func newSecurity(dir, cluster string) (*Security, error) {
	tdir := filepath.Join(dir, TLSDir)
	s := &Security{
		Cluster: cluster,
		CA:      filepath.Join(tdir, "ca.crt"), CAKey: filepath.Join(tdir, "ca.key"),
		Cert: filepath.Join(tdir, "client.crt"), Key: filepath.Join(tdir, "client.key"),
		TokenFile: filepath.Join(tdir, "admin.token"),
	}
	ca, err := pki.NewCA(s.Cluster, time.Now(), 0)
	if err != nil {
		return nil, err
	}
	if err := ca.Save(s.CA, s.CAKey); err != nil {
		return nil, err
	}
	cl, err := ca.Issue(pki.Request{Identity: pki.ClientIdentity(s.Cluster, "admin"), Client: true}, time.Now())
	if err != nil {
		return nil, err
	}
	if err := cl.Save(s.Cert, s.Key); err != nil {
		return nil, err
	}
	token, err := server.NewTokenSecret()
	if err != nil {
		return nil, err
	}
	if err := pki.WriteFile(s.TokenFile, []byte(token+"\n")); err != nil {
		return nil, err
	}
	return s, nil
}

// NodeFiles returns the paths of node id's certificate and key.
func (s *Security) NodeFiles(id uint64) (cert, key string) {
	dir := filepath.Dir(s.CA)
	return filepath.Join(dir, fmt.Sprintf("node-%d.crt", id)), filepath.Join(dir, fmt.Sprintf("node-%d.key", id))
}

// IssueNode writes node id's certificate, signed by the cluster's CA, for
// the host of its HTTP address (and loopback).
func (s *Security) IssueNode(id uint64, httpAddr string) error {
	ca, err := pki.LoadCA(s.CA, s.CAKey)
	if err != nil {
		return fmt.Errorf("localcluster: %w", err)
	}
	hosts := []string{"127.0.0.1", "::1", "localhost"}
	if h, _, err := net.SplitHostPort(httpAddr); err == nil {
		hosts = append(hosts, h)
	}
	c, err := ca.Issue(pki.Request{Identity: pki.NodeIdentity(s.Cluster, id), Hosts: hosts, Server: true, Client: true}, time.Now())
	if err != nil {
		return fmt.Errorf("localcluster: %w", err)
	}
	cert, key := s.NodeFiles(id)
	return c.Save(cert, key)
}

// serverArgs are the TLS and token flags of node id; an initial node
// (not join) is also given the initial admin token.
func (s *Security) serverArgs(id uint64, join bool) []string {
	if s == nil {
		return []string{"--insecure"}
	}
	cert, key := s.NodeFiles(id)
	args := []string{
		"--peer-cert-file", cert, "--peer-key-file", key, "--peer-trusted-ca-file", s.CA,
		"--cert-file", cert, "--key-file", key,
	}
	if !join {
		args = append(args, "--initial-admin-token-file", s.TokenFile)
	}
	return args
}

// StatusOf asks the node at an HTTP address for its status, within a
// second. /v1/status needs no token; a secure cluster needs acc.TLS.
func StatusOf(ctx context.Context, httpAddr string, acc Access) (api.NodeStatus, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	var st api.NodeStatus
	scheme, hc := "http", http.DefaultClient
	if acc.TLS != nil {
		scheme, hc = "https", acc.http
		if hc == nil {
			hc = NewAccess(acc.TLS, acc.Token).http
		}
	}
	base := scheme + "://" + httpAddr
	if strings.Contains(httpAddr, "://") { // an endpoint with its scheme
		base = httpAddr
	}
	req, err := http.NewRequestWithContext(ctx, "GET", base+"/v1/status", nil)
	if err != nil {
		return st, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("localcluster: %s: status %d", httpAddr, resp.StatusCode)
	}
	return st, json.NewDecoder(resp.Body).Decode(&st)
}
