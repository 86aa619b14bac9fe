package zookeeper

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"unicode"

	"github.com/go-zookeeper/zk"

	"coord/lease"
)

// A lease node's data is the holder's name, and its token is the node's
// czxid, the zxid of the transaction that created it. A node that a Renew
// moved to a longer session (rebind) was created later, so its czxid is no
// longer the tenure's token; its data then carries the token too:
//
//	holder                      (the czxid is the token)
//	"\x00" token "\x00" holder  (moved: token in decimal)
//
// A holder never starts with a NUL byte (checkHolder refuses it), so the
// two cannot be confused.
const reboundMark = 0

// encodeRebound returns the data of a node that carries the token of an
// earlier node.
func encodeRebound(token uint64, holder string) []byte {
	return []byte("\x00" + strconv.FormatUint(token, 10) + "\x00" + holder)
}

// decode makes the Record of a lease node from its data and stat. A node
// that coord did not write (persistent, empty, a token that cannot be or
// is not in canonical decimal, a holder that checkHolder refuses) is
// lease.ErrCorrupt: it never expires, or its holder cannot be told.
func decode(name string, data []byte, stat *zk.Stat) (lease.Record, error) {
	corrupt := func(format string, args ...any) (lease.Record, error) {
		return lease.Record{}, fmt.Errorf("%w: lease %q: node (czxid %#x) %s", lease.ErrCorrupt, name, stat.Czxid, fmt.Sprintf(format, args...))
	}
	if stat.EphemeralOwner == 0 {
		return corrupt("is not ephemeral: it would never expire, so it is not a lease")
	}
	if stat.Czxid <= 0 {
		return corrupt("has a czxid that no transaction has")
	}
	holder, token := string(data), uint64(stat.Czxid)
	if len(data) > 0 && data[0] == reboundMark {
		rest := data[1:]
		i := bytes.IndexByte(rest, 0)
		if i < 0 {
			return corrupt("has data %q: a token mark without its end", clip(data))
		}
		t, err := strconv.ParseUint(string(rest[:i]), 10, 64)
		// The token is an earlier node's czxid, so below this node's,
		// written as encodeRebound writes it.
		if err != nil || t == 0 || t >= uint64(stat.Czxid) || strconv.FormatUint(t, 10) != string(rest[:i]) {
			return corrupt("carries token %q, not a czxid before its own", clip(rest[:i]))
		}
		holder, token = string(rest[i+1:]), t
	}
	if holder == "" {
		return corrupt("names no holder")
	}
	if err := checkHolder(holder); err != nil {
		return corrupt("names a holder coord never writes (%v)", err)
	}
	return lease.Record{Name: name, Holder: holder, Token: token}, nil
}

// clip shortens data for an error message.
func clip(data []byte) string {
	const max = 64
	if len(data) > max {
		return string(data[:max]) + "..."
	}
	return string(data)
}

// checkName returns an error wrapping lease.ErrInvalid unless name can be
// one node's name under the chroot: ZooKeeper refuses "/", ".", "..",
// and control characters in a path component.
func checkName(name string) error {
	bad := func(why string) error {
		return fmt.Errorf("%s: %w: lease name %q: %s", prefix, lease.ErrInvalid, name, why)
	}
	switch {
	case name == "":
		return fmt.Errorf("%s: %w: empty lease name", prefix, lease.ErrInvalid)
	case name == "." || name == "..":
		return bad("not a node name")
	case strings.ContainsRune(name, '/'):
		return bad("contains '/' (a lease is one node under the chroot)")
	case strings.IndexFunc(name, unicode.IsControl) >= 0:
		return bad("contains a control character")
	case len(name) > maxNameBytes:
		return bad(fmt.Sprintf("longer than %d bytes", maxNameBytes))
	}
	return nil
}

// checkHolder refuses a holder that would read as a moved node's data.
func checkHolder(holder string) error {
	if strings.IndexByte(holder, 0) >= 0 {
		return fmt.Errorf("%s: %w: holder %q contains a NUL byte", prefix, lease.ErrInvalid, holder)
	}
	if len(holder) > maxHolderBytes {
		return fmt.Errorf("%s: %w: holder is longer than %d bytes", prefix, lease.ErrInvalid, maxHolderBytes)
	}
	return nil
}

// Limits on what a lease node holds, well below ZooKeeper's 1 MiB.
const (
	maxNameBytes   = 255
	maxHolderBytes = 4 << 10
	maxChrootBytes = 4 << 10
)

// checkChroot returns an error unless chroot is an absolute ZooKeeper path
// without empty, "." or ".." components; "/" is the root.
func checkChroot(chroot string) error {
	if chroot == "/" {
		return nil
	}
	if len(chroot) > maxChrootBytes {
		return fmt.Errorf("chroot is longer than %d bytes", maxChrootBytes)
	}
	if !strings.HasPrefix(chroot, "/") || strings.HasSuffix(chroot, "/") {
		return fmt.Errorf("chroot %q: want an absolute path without a trailing '/'", chroot)
	}
	for _, part := range strings.Split(chroot[1:], "/") {
		switch {
		case part == "":
			return fmt.Errorf("chroot %q: empty path component", chroot)
		case part == "." || part == "..":
			return fmt.Errorf("chroot %q: relative path component %q", chroot, part)
		case strings.IndexFunc(part, unicode.IsControl) >= 0:
			return fmt.Errorf("chroot %q: control character", chroot)
		}
	}
	return nil
}
