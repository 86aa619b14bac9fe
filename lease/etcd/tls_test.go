package etcd

import (
	"context"
	"errors"
	"net/url"
	"testing"
	"time"

	"coord/internal/leasekit/leasekittest"
	"coord/lease"
	"coord/lease/leasetest"
)

// The whole conformance suite over TLS, against an etcd member whose client
// port serves only TLS and requires client certificates (scripts/lib.sh
// start_etcd_tls): etcd://localhost:PORT?cacert=...&cert=...&key=....
func TestTLSConformance(t *testing.T) {
	url := leasekittest.ServerURL(t, "COORD_TEST_ETCD_TLS")
	leasetest.RunWithOptions(t, func(t *testing.T) lease.Backend { return leasekittest.Open(t, url) }, leasetest.Options{TTL: ttl, Duration: 5 * time.Second})
}

// Each way a TLS connection should fail, fails at Open with the reason.
// The etcd client only says that its deadline passed; Open then probes the
// endpoints with a TLS handshake of its own to say why (tlsProbe). A client
// speaking plaintext to the TLS port learns nothing more than the deadline.
func TestTLSRefusals(t *testing.T) {
	raw := leasekittest.ServerURL(t, "COORD_TEST_ETCD_TLS")
	other := leasekittest.NewOtherCA(t)
	for _, c := range []struct {
		why, url string
		is       func(error) bool
	}{
		{"no client certificate", leasekittest.Rewrite(t, raw, "", func(q url.Values) { q.Del("cert"); q.Del("key") }),
			leasekittest.RemoteAlert("bad certificate")},
		{"a client certificate from another CA", leasekittest.Rewrite(t, raw, "", func(q url.Values) { q.Set("cert", other.Cert); q.Set("key", other.Key) }),
			leasekittest.RemoteAlert("bad certificate")},
		{"a server certificate from another CA", leasekittest.Rewrite(t, raw, "", func(q url.Values) { q.Set("cacert", other.CA) }),
			leasekittest.UnknownAuthority},
		{"a server certificate for another name", leasekittest.Rewrite(t, raw, "127.0.0.1", nil),
			leasekittest.WrongHost},
		{"plaintext to the TLS port", leasekittest.Rewrite(t, raw, "", func(q url.Values) { q.Del("cacert"); q.Del("cert"); q.Del("key") }),
			func(err error) bool { return errors.Is(err, context.DeadlineExceeded) }},
	} {
		t.Run(c.why, func(t *testing.T) {
			t.Parallel() // each waits for the client's deadline
			leasekittest.OpenRefused(t, c.url, c.why, c.is)
		})
	}
}

func TestTLSBadURLs(t *testing.T) {
	other := leasekittest.NewOtherCA(t)
	leasekittest.OpenFails(t, lease.ErrInvalid,
		"etcd://127.0.0.1:1?tls=maybe",
		"etcd://127.0.0.1:1?tls=false&cacert="+other.CA,
		"etcd://127.0.0.1:1?cacert="+other.Key, // not a certificate
		"etcd://127.0.0.1:1?cert="+other.Cert)  // no key
}
