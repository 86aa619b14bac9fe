//go:build !linux

package apiwire

import (
	"net"
	"syscall"
)

// rawOf returns nil: requests are written by the connection's writer
// goroutine alone off Linux.
func rawOf(net.Conn) syscall.RawConn { return nil }

func tryWrite(syscall.RawConn, []byte) (int, error) { return 0, nil }
