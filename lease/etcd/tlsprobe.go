package etcd

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"time"
)

// tlsProbe dials each endpoint with TLS as the etcd client would, and
// returns why the first one that fails does. The etcd client (gRPC) reports
// a refused handshake only as a deadline passing; Open calls tlsProbe after
// such a failure so that its error says what was refused (an unknown CA, a
// name the certificate lacks, a client certificate the server wants).
func tlsProbe(ctx context.Context, endpoints []string, cfg *tls.Config) error {
	for _, ep := range endpoints {
		addr := ep
		if u, err := url.Parse(ep); err == nil && u.Host != "" {
			addr = u.Host
		}
		if err := probeOne(ctx, addr, cfg); err != nil {
			return fmt.Errorf("TLS with %s: %w", addr, err)
		}
	}
	return nil
}

// probeWait bounds one probe: the handshake, then a read, because TLS 1.3
// sends a server's refusal of the client's certificate after the handshake.
const probeWait = 2 * time.Second

func probeOne(ctx context.Context, addr string, cfg *tls.Config) error {
	ctx, cancel := context.WithTimeout(ctx, probeWait)
	defer cancel()
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	c := cfg.Clone()
	if c.ServerName == "" {
		c.ServerName = host
	}
	c.NextProtos = []string{"h2"} // as gRPC, so that the server answers as it would
	d := tls.Dialer{Config: c}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	deadline, _ := ctx.Deadline()
	conn.SetReadDeadline(deadline)
	_, err = conn.Read(make([]byte, 1))
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return nil // the server accepted us and waits for the client to speak
	}
	if err != nil {
		return err
	}
	return nil
}
