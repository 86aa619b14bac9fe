package file

import (
	"fmt"
	"os"

	"coord/lease"

	"golang.org/x/sys/unix"
)

// TenureFile returns a duplicate of the listening socket of this Backend's
// tenure of name under token, for a child process to inherit. While any
// process keeps it open, the tenure is alive to every other process: the
// lease stays held (until its expiry) after this process dies, and passes
// at once when the last copy closes. `coord run` gives it to its job, so
// that the lease outlives a SIGKILLed `coord run` exactly as long as the
// job does. It returns an error wrapping lease.ErrLost if this Backend does
// not hold that tenure. The caller closes the file.
func (b *Backend) TenureFile(name string, token uint64) (*os.File, error) {
	b.mu.Lock()
	t := b.tenures[tenureKey{name, token}]
	b.mu.Unlock()
	if t == nil {
		return nil, fmt.Errorf("lease/file: tenure file of %q token %d: %w", name, token, lease.ErrLost)
	}
	// Not t.ln.File(): that switches the shared file description to
	// blocking mode, and the accept loop would then block Close forever.
	raw, err := t.ln.SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("lease/file: tenure file of %q token %d: %w", name, token, err)
	}
	var dup int
	var dupErr error
	if err := raw.Control(func(fd uintptr) {
		dup, dupErr = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0)
	}); err != nil {
		return nil, fmt.Errorf("lease/file: tenure file of %q token %d: %w", name, token, err)
	}
	if dupErr != nil {
		return nil, fmt.Errorf("lease/file: tenure file of %q token %d: %w", name, token, dupErr)
	}
	return os.NewFile(uintptr(dup), t.ln.Addr().String()), nil
}
