package lease

import (
	"context"
	"fmt"
	"net/url"
	"sort"
	"sync"
)

// Opener opens a Backend for a parsed store URL.
type Opener func(ctx context.Context, u *url.URL) (Backend, error)

var (
	openersMu sync.RWMutex
	openers   = map[string]Opener{}
)

// Register makes a backend available under a URL scheme ("file", "redis").
// Backend packages call it from init, as database/sql drivers do, and the
// coord command imports them for their side effect. Register panics if the
// scheme is registered twice.
func Register(scheme string, open Opener) {
	openersMu.Lock()
	defer openersMu.Unlock()
	if _, dup := openers[scheme]; dup {
		panic("lease: Register called twice for scheme " + scheme)
	}
	openers[scheme] = open
}

// Schemes returns the registered URL schemes, sorted.
func Schemes() []string {
	openersMu.RLock()
	defer openersMu.RUnlock()
	s := make([]string, 0, len(openers))
	for scheme := range openers {
		s = append(s, scheme)
	}
	sort.Strings(s)
	return s
}

// Open opens the Backend named by a store URL such as
// file:///tmp/leader.lock or redis://127.0.0.1:6379/0. An unknown scheme is
// an error wrapping ErrInvalid that lists the known ones.
func Open(ctx context.Context, rawURL string) (Backend, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("%w: store URL %q: %v", ErrInvalid, rawURL, err)
	}
	openersMu.RLock()
	open, ok := openers[u.Scheme]
	openersMu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("%w: store URL %q: unknown scheme %q (known: %v)", ErrInvalid, rawURL, u.Scheme, Schemes())
	}
	return open(ctx, u)
}

// DefaultNamer is implemented by Backends whose URL names a lease as well as
// a store: the file backend's file:///path/leader.lock names the lease
// "leader.lock". Commands use that name when none is given.
type DefaultNamer interface {
	DefaultName() string
}

// DefaultName returns b's default lease name if it has one, else fallback.
func DefaultName(b Backend, fallback string) string {
	if n, ok := b.(DefaultNamer); ok && n.DefaultName() != "" {
		return n.DefaultName()
	}
	return fallback
}
