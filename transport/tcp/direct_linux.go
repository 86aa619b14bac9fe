package tcp

import (
	"os"
	"syscall"
)

// directWrites: Linux sockets can be written without waiting (send with
// MSG_DONTWAIT).
const directWrites = true

// tryWrite writes what the socket's buffer takes of b at once, and
// returns how much that was: 0 when it is full. MSG_NOSIGNAL: a peer gone
// is an EPIPE error, not a signal.
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
	if err != nil {
		return 0, os.NewSyscallError("sendmsg", err)
	}
	return n, nil
}
