package freeport

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
)

const (
	// lowest is the lowest port handed out: above the registered ports
	// most services use.
	lowest = 10000
	// minSpan is the fewest ports below the ephemeral range worth using;
	// with fewer, Port falls back to the kernel's choice.
	minSpan = 1000
	// attempts bounds the random draws before Port gives up.
	attempts = 200
	// rangeFile holds the ephemeral range, "low high".
	rangeFile = "/proc/sys/net/ipv4/ip_local_port_range"
)

var (
	mu    sync.Mutex
	given = map[int]bool{} // ports handed out by this process
)

// Port returns a loopback TCP port that was free a moment ago and lies
// below the ephemeral range, never one it returned before in this process.
func Port() (int, error) {
	low, err := ephemeralLow()
	if err != nil || low-lowest < minSpan {
		return kernelPort()
	}
	return pick(lowest, low)
}

// pick returns a free port of [lo, hi) not handed out before.
func pick(lo, hi int) (int, error) {
	mu.Lock()
	defer mu.Unlock()
	for range attempts {
		p := lo + rand.IntN(hi-lo)
		if given[p] || !free(p) {
			continue
		}
		given[p] = true
		return p, nil
	}
	return 0, fmt.Errorf("freeport: no free port in [%d, %d) after %d tries", lo, hi, attempts)
}

// Addr returns "127.0.0.1:PORT" for a Port.
func Addr() (string, error) {
	p, err := Port()
	if err != nil {
		return "", err
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(p)), nil
}

// free reports whether port can be bound on 127.0.0.1 now.
func free(port int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return false
	}
	l.Close()
	return true
}

// ephemeralLow returns the lowest port of the ephemeral range.
func ephemeralLow() (int, error) {
	b, err := os.ReadFile(rangeFile)
	if err != nil {
		return 0, err
	}
	fields := strings.Fields(string(b))
	if len(fields) != 2 {
		return 0, errors.New("freeport: " + rangeFile + ": want two numbers")
	}
	return strconv.Atoi(fields[0])
}

// kernelPort returns a port the kernel picks, where the range cannot be
// read or leaves no room below it.
func kernelPort() (int, error) {
	for range attempts {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, fmt.Errorf("freeport: %w", err)
		}
		p := l.Addr().(*net.TCPAddr).Port
		l.Close()
		mu.Lock()
		dup := given[p]
		given[p] = true
		mu.Unlock()
		if !dup {
			return p, nil
		}
	}
	return 0, errors.New("freeport: the kernel kept choosing ports handed out already")
}
