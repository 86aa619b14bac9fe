// Package apiwire carries coord's HTTP API over one multiplexed connection:
// many requests in flight at once on one TCP (or TLS) connection, each
// served by the API's own http.Handler, unchanged. It exists for cost:
// net/http spends one read and one write system call on every request
// and more on its background read and goroutine hand-offs; here one
// reader goroutine decodes many frames per read; an answer is held until
// its handler flushes or ends and then goes out in one write, by the
// handler's goroutine when the connection is not being written, and
// otherwise by one writer goroutine, which sends every answer completed
// meanwhile in one write (a Raft batch commits many writes at once). A
// handler about to write while other requests are in flight on its
// connection yields once first, so that the answers released with its own
// join its write; a request alone on its connection does not wait.
//
// # Frames
//
// Both directions are a sequence of frames:
//
//	[u32 length][u32 stream][u8 type][payload: length bytes]
//
// big-endian, length counting the payload only. The client opens a stream
// with a request frame under an odd stream number it has not used on the
// connection; the server answers on the same number with a head frame,
// zero or more data frames and an end frame. Types:
//
//	1 request  method, target, headers, body (the whole request)
//	2 head     status, headers
//	3 data     body bytes of the answer
//	4 end      the answer is complete (no payload)
//	5 cancel   client to server: the request's context ended
//	6 refuse   server to client: the stream was not served, so the request
//	           had no effect (a UTF-8 reason; ErrRefused)
//	7 abort    server to client: the answer is lost after the handler ran
//	           (a panic, headers that cannot travel): it may have had its effect
//
// A request's payload: u8 method length, method; u16 target length,
// target (path and query); then the headers; then the body to the end of
// the payload. A head's payload: u16 status; then the headers. Headers:
// u8 count, then per header u8 name length, name, u16 value length,
// value. Only the headers the API uses travel (RequestHeaders,
// ResponseHeaders); others are dropped.
//
// In plain mode a client opens the connection with Preface; over TLS it
// offers ALPN protocol ALPN instead, and sends no preface. A client with a
// fallback (TransportConfig.Fallback) offers "http/1.1" after ALPN, and a
// server that speaks wire must choose ALPN; a server that does not chooses
// http/1.1 over TLS or, in plain mode, answers the preface with an HTTP
// status line (net/http's 400 for a bad request line), and the client
// sends HTTP instead.
//
// # Limits
//
// Every length and count is checked against Limits before anything is
// allocated for it, and a payload is read into memory as it arrives, not
// at the length its header claims. ServerConfig.FrameTimeout bounds a
// frame's payload once its header came, and a connection's first frame;
// ServerConfig.WriteTimeout one write of answers. A frame that breaks the format or a limit closes its
// connection (the server logs why); a request beyond StreamsMax is
// refused on its own stream and the connection carries on. Bytes from
// the peer are input: decoding never panics (FuzzReadFrame).
//
// # What it does not do
//
// There is no flow control: a client that does not read an answer
// stream holds the server's writes to that connection back until a write
// outlasts ServerConfig.WriteTimeout, which closes the connection and
// ends every request on it; a client buffers in memory whatever a server
// sends it.
package apiwire
