package leasekit

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"os"

	"coord/lease"
)

// TLSFiles names the PEM files of a TLS client, as the store URLs of Redis
// (rediss://) and etcd take them, after redis-cli's and etcdctl's flags:
// cacert, cert and key.
type TLSFiles struct {
	// CA holds the certificates that verify the server; empty: the
	// system's roots.
	CA string
	// Cert and Key are the client's certificate and private key, for a
	// server that asks for one; both or neither.
	Cert, Key string
}

// Empty reports whether no file is named.
func (f TLSFiles) Empty() bool { return f == TLSFiles{} }

// TakeTLSParams removes the parameters cacert, cert and key from q and
// returns the files they name (the last value of each).
func TakeTLSParams(q url.Values) TLSFiles {
	take := func(key string) string {
		v := q[key]
		q.Del(key)
		if len(v) == 0 {
			return ""
		}
		return v[len(v)-1]
	}
	return TLSFiles{CA: take("cacert"), Cert: take("cert"), Key: take("key")}
}

// Config loads the files into a client tls.Config, TLS 1.2 at least,
// that verifies the server's certificate chain and, if serverName is not
// empty, that the certificate names serverName. Every problem with a file
// (missing, unreadable, not PEM, a key that does not match its
// certificate, a certificate without its key) is an error wrapping
// lease.ErrInvalid, prefixed with prefix ("lease/redis").
func (f TLSFiles) Config(prefix, serverName string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: serverName}
	var errs []error
	if f.CA != "" {
		pem, err := os.ReadFile(f.CA)
		if err != nil {
			errs = append(errs, fmt.Errorf("cacert: %w", err))
		} else {
			cfg.RootCAs = x509.NewCertPool()
			if !cfg.RootCAs.AppendCertsFromPEM(pem) {
				errs = append(errs, fmt.Errorf("cacert %s: no PEM certificate in it", f.CA))
			}
		}
	}
	switch {
	case f.Cert != "" && f.Key != "":
		pair, err := tls.LoadX509KeyPair(f.Cert, f.Key)
		if err != nil {
			errs = append(errs, fmt.Errorf("cert %s, key %s: %w", f.Cert, f.Key, err))
		} else {
			cfg.Certificates = []tls.Certificate{pair}
		}
	case f.Cert != "":
		errs = append(errs, fmt.Errorf("cert %s without a key", f.Cert))
	case f.Key != "":
		errs = append(errs, fmt.Errorf("key %s without a cert", f.Key))
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%s: %w: TLS: %w", prefix, lease.ErrInvalid, errors.Join(errs...))
	}
	return cfg, nil
}
