package faultproxy_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"time"

	"coord/internal/faultproxy"
)

// A client talks to an echo server through the proxy; a blackhole stalls
// its request (the read times out), and a cut resets its connection.
func Example() {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go io.Copy(c, c)
		}
	}()
	p, _ := faultproxy.New(ln.Addr().String())
	defer p.Close()

	c, _ := net.Dial("tcp", p.Addr())
	defer c.Close()
	r := bufio.NewReader(c)
	ask := func(wait time.Duration) {
		c.SetDeadline(time.Now().Add(wait))
		fmt.Fprintln(c, "ping")
		line, err := r.ReadString('\n')
		fmt.Printf("%q %v\n", line, err != nil)
	}
	ask(5 * time.Second)
	p.Blackhole(true)
	ask(100 * time.Millisecond)
	p.Cut()
	p.Blackhole(false)
	ask(5 * time.Second)
	// Output:
	// "ping\n" false
	// "" true
	// "" true
}
