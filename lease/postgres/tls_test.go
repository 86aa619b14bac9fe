package postgres

import (
	"errors"
	"net/url"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"coord/internal/leasekit/leasekittest"
	"coord/lease"
	"coord/lease/leasetest"
)

// The whole conformance suite over TLS with sslmode=verify-full and a
// client certificate, against a PostgreSQL that accepts TCP connections
// only over TLS and only with a certificate naming the user (scripts/lib.sh
// start_postgres_tls). Every connection goes the same way: the pool's, the
// LISTEN connection's and, with advisory=true, the holders' and watchers'.
func TestTLSConformance(t *testing.T) {
	raw := leasekittest.ServerURL(t, "COORD_TEST_POSTGRES_TLS")
	for _, mode := range []string{"listen=true", "advisory=true"} {
		t.Run(mode, func(t *testing.T) {
			u := leasekittest.Rewrite(t, raw, "", func(q url.Values) {
				extra, _ := url.ParseQuery(mode)
				for k, v := range extra {
					q[k] = v
				}
			})
			leasetest.Run(t, func(t *testing.T) lease.Backend { return leasekittest.Open(t, u) })
		})
	}
}

// pgError reports whether err is the server's refusal with SQLSTATE code
// (28000: invalid authorization, as for a connection without a valid
// client certificate).
func pgError(code string) func(error) bool {
	return func(err error) bool {
		var pe *pgconn.PgError
		return errors.As(err, &pe) && pe.Code == code
	}
}

// Each way a TLS connection should fail, fails at Open with the reason,
// with pgx's sslmode semantics: verify-full checks the CA and the host
// name, verify-ca only the CA, require and prefer check nothing.
func TestTLSRefusals(t *testing.T) {
	raw := leasekittest.ServerURL(t, "COORD_TEST_POSTGRES_TLS")
	other := leasekittest.NewOtherCA(t)
	set := func(kv ...string) func(url.Values) {
		return func(q url.Values) {
			for i := 0; i < len(kv); i += 2 {
				if kv[i+1] == "" {
					q.Del(kv[i])
				} else {
					q.Set(kv[i], kv[i+1])
				}
			}
		}
	}
	for _, c := range []struct {
		why, url string
		is       func(error) bool
	}{
		{"no client certificate", leasekittest.Rewrite(t, raw, "", set("sslcert", "", "sslkey", "")), pgError("28000")},
		// The server names the CAs it accepts, and crypto/tls sends no
		// certificate that none of them issued: the server sees none.
		{"a client certificate from another CA", leasekittest.Rewrite(t, raw, "", set("sslcert", other.Cert, "sslkey", other.Key)), pgError("28000")},
		{"a server certificate from another CA", leasekittest.Rewrite(t, raw, "", set("sslrootcert", other.CA)), leasekittest.UnknownAuthority},
		{"a server certificate for another name", leasekittest.Rewrite(t, raw, "127.0.0.1", nil), leasekittest.WrongHost},
		{"plaintext", leasekittest.Rewrite(t, raw, "", set("sslmode", "disable")), pgError("28000")},
	} {
		t.Run(c.why, func(t *testing.T) { leasekittest.OpenRefused(t, c.url, c.why, c.is) })
	}
	// verify-ca checks the chain but not the name: the same server reached
	// as 127.0.0.1 is accepted. So is it by require without sslrootcert,
	// which checks nothing; with sslrootcert, require is verify-ca (libpq's
	// rule, which pgx follows).
	leasekittest.Open(t, leasekittest.Rewrite(t, raw, "127.0.0.1", set("sslmode", "verify-ca")))
	leasekittest.Open(t, leasekittest.Rewrite(t, raw, "127.0.0.1", set("sslmode", "require", "sslrootcert", "")))
	leasekittest.OpenRefused(t, leasekittest.Rewrite(t, raw, "", set("sslmode", "require", "sslrootcert", other.CA)),
		"require with another CA's sslrootcert", leasekittest.UnknownAuthority)
}

func TestTLSBadURLs(t *testing.T) {
	other := leasekittest.NewOtherCA(t)
	leasekittest.OpenFails(t, lease.ErrInvalid,
		"postgres://127.0.0.1:1/db?sslmode=verify-full&sslrootcert=/nonexistent/ca.crt",
		"postgres://127.0.0.1:1/db?sslmode=verify-full&sslrootcert="+other.Key,
		"postgres://127.0.0.1:1/db?sslmode=verify-full&sslcert="+other.Cert)
}
