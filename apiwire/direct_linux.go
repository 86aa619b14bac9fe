package apiwire

import (
	"net"
	"syscall"
)

// rawOf returns c's raw connection when a request may be written to it
// without waiting (tryWrite): a plain TCP connection. Nil for TLS, whose
// records the caller cannot write part of.
func rawOf(c net.Conn) syscall.RawConn {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return nil
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return nil
	}
	return rc
}

// tryWrite writes what the socket's buffer takes of b at once, never
// waiting, and returns how much that was: 0 when it is full
// (MSG_DONTWAIT). MSG_NOSIGNAL: a peer gone is an EPIPE error, not a
// signal.
func tryWrite(rc syscall.RawConn, b []byte) (int, error) {
	var n int
	var err error
	cerr := rc.Write(func(fd uintptr) bool {
		for {
			n, err = syscall.SendmsgN(int(fd), b, nil, nil, syscall.MSG_DONTWAIT|syscall.MSG_NOSIGNAL)
			if err != syscall.EINTR {
				return true // done, whatever was taken: never wait
			}
		}
	})
	if cerr != nil {
		return 0, cerr
	}
	if err == syscall.EAGAIN {
		return 0, nil
	}
	return n, err
}
