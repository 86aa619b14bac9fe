//go:build !linux

package file

import (
	"context"
	"errors"
	"fmt"
	"net/url"

	"coord/lease"
)

// ErrNeedsLinux is what opening a file:// store returns on other platforms.
// It wraps errors.ErrUnsupported.
var ErrNeedsLinux = fmt.Errorf("lease/file: the file store needs Linux "+
	"(abstract unix sockets, renameat2 RENAME_EXCHANGE, O_TMPFILE, inotify, the boot id): %w", errors.ErrUnsupported)

// The scheme stays registered, so that file:// names its store and says
// why it cannot open it rather than being an unknown scheme.
func init() {
	lease.Register("file", func(context.Context, *url.URL) (lease.Backend, error) { return nil, ErrNeedsLinux })
}
