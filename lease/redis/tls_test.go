package redis

import (
	"net/url"
	"os"
	"path/filepath"
	"testing"

	"coord/internal/leasekit/leasekittest"
	"coord/lease"
	"coord/lease/leasetest"
)

// The whole conformance suite over TLS, against a redis-server that serves
// only TLS and requires a client certificate (scripts/lib.sh
// start_redis_tls): rediss://localhost:PORT/0?cacert=...&cert=...&key=....
func TestTLSConformance(t *testing.T) {
	url := leasekittest.ServerURL(t, "COORD_TEST_REDIS_TLS")
	leasetest.Run(t, func(t *testing.T) lease.Backend { return leasekittest.Open(t, url) })
}

// Each way a TLS connection should fail, fails at Open with the reason:
// the server refuses a client without a certificate or with one from
// another CA; the client refuses a server its CA did not sign, or whose
// certificate does not name the host dialed (the test server's names
// localhost, not 127.0.0.1); plaintext to the TLS port gets nowhere.
func TestTLSRefusals(t *testing.T) {
	raw := leasekittest.ServerURL(t, "COORD_TEST_REDIS_TLS")
	other := leasekittest.NewOtherCA(t)
	noCert := leasekittest.Rewrite(t, raw, "", func(q url.Values) { q.Del("cert"); q.Del("key") })
	leasekittest.OpenRefused(t, noCert, "no client certificate", leasekittest.RemoteAlert("certificate required"))
	otherClient := leasekittest.Rewrite(t, raw, "", func(q url.Values) { q.Set("cert", other.Cert); q.Set("key", other.Key) })
	leasekittest.OpenRefused(t, otherClient, "a client certificate from another CA", leasekittest.RemoteAlert("unknown certificate authority"))
	otherCA := leasekittest.Rewrite(t, raw, "", func(q url.Values) { q.Set("cacert", other.CA) })
	leasekittest.OpenRefused(t, otherCA, "a server certificate from another CA", leasekittest.UnknownAuthority)
	wrongHost := leasekittest.Rewrite(t, raw, "127.0.0.1", nil)
	leasekittest.OpenRefused(t, wrongHost, "a server certificate for another name", leasekittest.WrongHost)
	plain := leasekittest.Rewrite(t, "redis"+raw[len("rediss"):], "", func(q url.Values) { q.Del("cacert"); q.Del("cert"); q.Del("key") })
	leasekittest.OpenRefused(t, plain, "plaintext to the TLS port", leasekittest.ClosedByServer)
}

// TLS parameters that cannot work are refused before anything is dialed.
func TestTLSBadParameters(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	other := leasekittest.NewOtherCA(t)
	leasekittest.OpenFails(t, lease.ErrInvalid,
		"redis://127.0.0.1:1/0?cacert="+other.CA, // TLS files without rediss://
		"rediss://127.0.0.1:1/0?cacert="+filepath.Join(dir, "missing.crt"),
		"rediss://127.0.0.1:1/0?cacert="+notPEM,
		"rediss://127.0.0.1:1/0?cert="+other.Cert, // no key
		"rediss://127.0.0.1:1/0?key="+other.Key,   // no cert
		"rediss://127.0.0.1:1/0?cert="+other.Cert+"&key="+other.CA)
}
