package faultproxy

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
)

// Proxy forwards TCP connections from its own loopback address to a target.
//
// Proxy is safe for concurrent use: the fault switches may be flipped from
// any goroutine while traffic flows.
type Proxy struct {
	target   string
	listener net.Listener

	mu        sync.Mutex
	cond      *sync.Cond // signalled when blackhole turns off or the proxy closes
	conns     map[*link]struct{}
	blackhole bool
	reject    bool
	closed    bool
	wg        sync.WaitGroup
}

// link is one proxied connection: the client's side and the server's.
type link struct {
	client, server net.Conn
	cut            bool // guarded by Proxy.mu
}

// New starts a proxy on 127.0.0.1 (a port the kernel picks) that forwards to
// target ("127.0.0.1:6379").
func New(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultproxy: listen: %w", err)
	}
	p := &Proxy{target: target, listener: ln, conns: map[*link]struct{}{}}
	p.cond = sync.NewCond(&p.mu)
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr returns the proxy's address, "127.0.0.1:PORT", for the client to dial.
func (p *Proxy) Addr() string { return p.listener.Addr().String() }

// Conns returns how many proxied connections are open.
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// Cut resets every open connection, on both sides. New connections are
// still accepted (unless Reject is on): a cut is a moment, not a state.
func (p *Proxy) Cut() {
	p.mu.Lock()
	links := make([]*link, 0, len(p.conns))
	for l := range p.conns {
		l.cut = true
		links = append(links, l)
	}
	p.mu.Unlock()
	p.cond.Broadcast() // wake copies held by a blackhole: their link is gone
	for _, l := range links {
		l.close()
	}
}

// Blackhole stalls (on) or resumes (off) all traffic, on open connections
// and new ones alike. While it is on, new connections are accepted but not
// forwarded, so a client's dial succeeds and its first request goes
// unanswered, as across a partition.
func (p *Proxy) Blackhole(on bool) {
	p.mu.Lock()
	p.blackhole = on
	p.mu.Unlock()
	p.cond.Broadcast()
}

// Reject makes the proxy close (on) or accept (off) new connections at once;
// open connections are not touched. Together with Cut it models a server
// that is down: connections refused until Reject(false).
func (p *Proxy) Reject(on bool) {
	p.mu.Lock()
	p.reject = on
	p.mu.Unlock()
}

// Close stops the proxy and closes every connection.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.mu.Unlock()
	p.cond.Broadcast()
	err := p.listener.Close()
	p.Cut()
	p.wg.Wait()
	return err
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.listener.Accept()
		if err != nil {
			return // closed
		}
		p.mu.Lock()
		reject, closed := p.reject, p.closed
		p.mu.Unlock()
		if reject || closed {
			resetClose(client)
			continue
		}
		p.wg.Add(1)
		go p.serve(client)
	}
}

// serve dials the target for one client and copies both ways until either
// side closes or the proxy cuts the link.
func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	if !p.waitOpen(nil) {
		resetClose(client)
		return
	}
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		resetClose(client)
		return
	}
	l := &link{client: client, server: server}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		l.close()
		return
	}
	p.conns[l] = struct{}{}
	p.mu.Unlock()

	done := make(chan struct{}, 2)
	go func() { p.copy(l, server, client); done <- struct{}{} }()
	go func() { p.copy(l, client, server); done <- struct{}{} }()
	<-done
	l.close() // one direction ended: end the other, as a proxy must
	<-done
	p.mu.Lock()
	delete(p.conns, l)
	p.mu.Unlock()
}

// copy forwards bytes from src to dst, holding each chunk while the
// blackhole is on.
func (p *Proxy) copy(l *link, dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.waitOpen(l) {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				return
			}
			if tcp, ok := dst.(*net.TCPConn); ok {
				_ = tcp.CloseWrite() // pass the half-close on
			}
			return
		}
	}
}

// waitOpen blocks while the blackhole is on. It reports false if the proxy
// closed or the link (if any) was cut meanwhile.
func (p *Proxy) waitOpen(l *link) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.blackhole && !p.closed && (l == nil || !l.cut) {
		p.cond.Wait()
	}
	return !p.closed && (l == nil || !l.cut)
}

func (l *link) close() {
	resetClose(l.client)
	resetClose(l.server)
}

// resetClose closes c with a TCP reset rather than an orderly FIN, so that
// the peer sees the connection fail, not end.
func resetClose(c net.Conn) {
	if tcp, ok := c.(*net.TCPConn); ok {
		_ = tcp.SetLinger(0)
	}
	_ = c.Close()
}
