package pki

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
)

// Files names PEM files: a certificate and its key (both or neither), and
// a CA bundle (one or more certificates; several during a CA rotation).
type Files struct {
	Cert, Key, CA string
}

// SourceOptions tune a Source.
type SourceOptions struct {
	// Check, if set, is called on every certificate loaded (the first and
	// each reload); an error refuses the files. A node uses it to insist
	// that a reloaded certificate names the same identity.
	Check func(leaf *x509.Certificate) error
	// VerifyOwn checks that the certificate chains to the CA bundle of
	// the same Source: a node's peer certificate must be one its peers,
	// trusting the same bundle, accept.
	VerifyOwn bool
	// Logger logs reloads. Nil: slog.Default().
	Logger *slog.Logger
	// Now is the clock certificates' validity is checked against. Nil:
	// time.Now.
	Now func() time.Time
}

// material is one loaded set of files.
type material struct {
	cert  *tls.Certificate // nil without Cert/Key
	leaf  *x509.Certificate
	roots *x509.CertPool // nil without CA
}

// Source holds the certificate, key and CA bundle loaded from Files, and
// loads them again on Reload. A reload that fails (a missing or malformed
// file, a key that does not match, a certificate expired or refused by
// Check) changes nothing: the Source keeps serving what it had.
//
// Source is safe for concurrent use.
type Source struct {
	files Files
	opts  SourceOptions
	cur   atomic.Pointer[material]
	mu    sync.Mutex // serializes reloads
}

// NewSource loads files. At least one of a certificate (with its key) and
// a CA bundle must be named.
func NewSource(files Files, opts SourceOptions) (*Source, error) {
	if (files.Cert == "") != (files.Key == "") {
		return nil, fmt.Errorf("%w: a certificate file and a key file go together (got %q and %q)", ErrInvalid, files.Cert, files.Key)
	}
	if files.Cert == "" && files.CA == "" {
		return nil, fmt.Errorf("%w: no certificate and no CA file", ErrInvalid)
	}
	if opts.VerifyOwn && (files.Cert == "" || files.CA == "") {
		return nil, fmt.Errorf("%w: VerifyOwn needs a certificate and a CA file", ErrInvalid)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	s := &Source{files: files, opts: opts}
	m, err := s.load()
	if err != nil {
		return nil, err
	}
	s.cur.Store(m)
	return s, nil
}

// log returns the logger: the one given, or the default one as it is now
// (a command sets it up after parsing its flags).
func (s *Source) log() *slog.Logger {
	if s.opts.Logger != nil {
		return s.opts.Logger
	}
	return slog.Default()
}

// Files returns the files the Source loads.
func (s *Source) Files() Files { return s.files }

// Certificate returns the current certificate (nil without one).
func (s *Source) Certificate() *tls.Certificate { return s.cur.Load().cert }

// Leaf returns the current certificate, parsed (nil without one).
func (s *Source) Leaf() *x509.Certificate { return s.cur.Load().leaf }

// Roots returns the current CA bundle (nil without one).
func (s *Source) Roots() *x509.CertPool { return s.cur.Load().roots }

// Reload loads the files again. On error the Source is unchanged.
func (s *Source) Reload() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, err := s.load()
	if err != nil {
		s.log().Error("certificate reload failed; keeping the certificates loaded before", "cert", s.files.Cert, "ca", s.files.CA, "err", err)
		return err
	}
	s.cur.Store(m)
	attrs := []any{"cert", s.files.Cert, "ca", s.files.CA}
	if m.leaf != nil {
		attrs = append(attrs, "serial", m.leaf.SerialNumber.Text(16), "not_after", m.leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	s.log().Info("certificates reloaded", attrs...)
	return nil
}

func (s *Source) load() (*material, error) {
	m := &material{}
	now := s.opts.Now()
	if s.files.CA != "" {
		b, err := os.ReadFile(s.files.CA)
		if err != nil {
			return nil, fmt.Errorf("pki: CA file: %w", err)
		}
		certs, err := parseCertificates(b)
		if err != nil {
			return nil, fmt.Errorf("pki: CA file %s: %w", s.files.CA, err)
		}
		m.roots = x509.NewCertPool()
		for _, c := range certs {
			if !c.IsCA {
				return nil, fmt.Errorf("%w: CA file %s holds %q, which is not a CA certificate", ErrInvalid, s.files.CA, c.Subject.CommonName)
			}
			m.roots.AddCert(c)
		}
	}
	if s.files.Cert != "" {
		pair, err := tls.LoadX509KeyPair(s.files.Cert, s.files.Key)
		if err != nil {
			return nil, fmt.Errorf("pki: certificate %s and key %s: %w", s.files.Cert, s.files.Key, err)
		}
		leaf := pair.Leaf
		if leaf == nil {
			if leaf, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
				return nil, fmt.Errorf("pki: certificate %s: %w", s.files.Cert, err)
			}
			pair.Leaf = leaf
		}
		if now.Before(leaf.NotBefore) || now.After(leaf.NotAfter) {
			return nil, fmt.Errorf("%w: certificate %s is valid from %v to %v, not now (%v)", ErrInvalid, s.files.Cert,
				leaf.NotBefore.UTC(), leaf.NotAfter.UTC(), now.UTC())
		}
		if s.opts.VerifyOwn {
			inter := x509.NewCertPool()
			for _, der := range pair.Certificate[1:] {
				if c, err := x509.ParseCertificate(der); err == nil {
					inter.AddCert(c)
				}
			}
			if _, err := leaf.Verify(x509.VerifyOptions{Roots: m.roots, Intermediates: inter, CurrentTime: now,
				KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
				return nil, fmt.Errorf("%w: certificate %s is not issued by the CA in %s: %v", ErrInvalid, s.files.Cert, s.files.CA, err)
			}
		}
		if s.opts.Check != nil {
			if err := s.opts.Check(leaf); err != nil {
				return nil, fmt.Errorf("pki: certificate %s: %w", s.files.Cert, err)
			}
		}
		m.cert, m.leaf = &pair, leaf
	}
	return m, nil
}

// watchSettle is how long Watch waits after a file event before it
// reloads, so that a certificate and its key written one after the other
// are read together.
const watchSettle = 200 * time.Millisecond

// Watch reloads the files whenever one of them changes (written, or
// replaced by a rename), until ctx ends. It watches the files'
// directories, since tools replace certificates by renaming new files
// over the old ones. Reload failures are logged, and the next change
// tries again.
func (s *Source) Watch(ctx context.Context) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("pki: watch: %w", err)
	}
	defer w.Close()
	names := map[string]bool{}
	dirs := map[string]bool{}
	for _, f := range []string{s.files.Cert, s.files.Key, s.files.CA} {
		if f == "" {
			continue
		}
		abs, err := filepath.Abs(f)
		if err != nil {
			return fmt.Errorf("pki: watch %s: %w", f, err)
		}
		names[abs] = true
		dirs[filepath.Dir(abs)] = true
	}
	for d := range dirs {
		if err := w.Add(d); err != nil {
			return fmt.Errorf("pki: watch %s: %w", d, err)
		}
	}
	var settle <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return nil
			}
			if names[filepath.Clean(ev.Name)] && ev.Op&(fsnotify.Write|fsnotify.Create|fsnotify.Rename) != 0 {
				settle = time.After(watchSettle)
			}
		case err, ok := <-w.Errors:
			if !ok {
				return nil
			}
			s.log().Warn("certificate watch", "err", err)
		case <-settle:
			settle = nil
			_ = s.Reload() // logged
		}
	}
}
