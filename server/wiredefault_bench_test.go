package server

import (
	"crypto/tls"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"coord/apiwire"
)

// BenchmarkFirstRequest measures what a new client pays for its first
// request (dial, TLS handshake, one PUT) to a node, as the client package
// builds its transport: HTTP/1.1 alone (client.Config.NoWire) against a
// node run with --wire=false; wire with its HTTP/1.1 fallback against the
// same node (the fallback's cost: in clear one more connection, the
// preface's, answered 400; over TLS none, the handshake that chose
// HTTP/1.1 carrying the request); and wire against a
// node that serves it. docs/BENCHMARKS.md, "The wire client's fallback".
func BenchmarkFirstRequest(b *testing.B) {
	for _, secure := range []bool{false, true} {
		var keys *apiKeys
		if secure {
			keys = newAPIKeys(b)
		}
		name := map[bool]string{false: "plain", true: "tls"}[secure]
		for _, c := range []struct {
			name       string
			nodeWire   bool
			clientWire bool
		}{
			{"http1-to-nowire", false, false},
			{"fallback-to-nowire", false, true},
			{"wire-to-wire", true, true},
		} {
			b.Run(name+"/"+c.name, func(b *testing.B) {
				s := startAPIServer(b, "127.0.0.1:0", keys, false, c.nodeWire, DefaultHTTPLimits())
				var conf *tls.Config
				if s.roots != nil {
					conf = &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: s.roots}
				}
				for b.Loop() {
					fallback := &http.Transport{TLSClientConfig: conf, MaxIdleConnsPerHost: 4}
					var tr http.RoundTripper = fallback
					if c.clientWire {
						wire := apiwire.NewTransport(apiwire.TransportConfig{TLS: conf, DialTimeout: 10 * time.Second, Fallback: fallback})
						fallback.DialTLSContext = wire.DialFallbackTLS
						tr = wire
					}
					req, _ := http.NewRequest("PUT", s.base+"/v1/kv/first", strings.NewReader("v"))
					resp, err := tr.RoundTrip(req)
					if err != nil {
						b.Fatal(err)
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != http.StatusOK {
						b.Fatalf("PUT: %d", resp.StatusCode)
					}
					tr.(interface{ CloseIdleConnections() }).CloseIdleConnections()
				}
			})
		}
	}
}
