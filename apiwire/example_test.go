package apiwire_test

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"coord/apiwire"
)

// One port serves the same handler over HTTP/1.1 and over wire; a client
// with wire's Transport sends every request over one connection.
func Example() {
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Coord-Node", "1")
		fmt.Fprintf(w, "%s %s", r.Method, r.URL.Path)
	})
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	ws := apiwire.NewServer(handler, apiwire.ServerConfig{})
	l := apiwire.NewListener(inner, apiwire.ListenerConfig{SortTimeout: 10 * time.Second}, func(c net.Conn) { ws.ServeConn(c) })
	srv := &http.Server{Handler: handler}
	go srv.Serve(l)
	defer srv.Close()
	defer ws.Drain()

	tr := apiwire.NewTransport(apiwire.TransportConfig{})
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	resp, err := hc.Get("http://" + l.Addr().String() + "/v1/status")
	if err != nil {
		panic(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	fmt.Println(resp.Proto, resp.StatusCode, resp.Header.Get("Coord-Node"), string(body))
	// Output: COORD-WIRE/1 200 1 GET /v1/status
}
