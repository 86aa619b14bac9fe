package server

import (
	"net/http"
	"net/url"
	"strings"

	"coord/apiwire"
)

// directKeys serves GET and PUT of one key over wire straight from their
// frames (apiwire.DirectHandler): no http.Request, URL, request header map
// or mux match is built for them (issue 21). It is a second way in, not a
// second API: the request goes to API.serve with the very route the mux
// would have chosen (API.keyGet, API.keyPut), which runs the same token
// check, body limit, handler, forwarding and metrics; the handlers of the
// key routes read the request only through request's methods, which
// answer alike for both ways in. TestDirectKeysMatchHTTP compares the two
// answers byte for byte.
//
// It takes only the targets whose key the mux would give unchanged
// (directKey), and only while the node is not handing leadership over
// (handedOver's phase): the others go to the http.Handler as before.
//
// directKeys is safe for concurrent use.
type directKeys struct {
	api *API
	// drain is the server's handedOver, nil if none: its writes before a
	// hand-over are answered through a handOverAnswer, as it does.
	drain *handedOver
}

// Accepts takes GET and PUT of a key whose target directKey takes.
func (d *directKeys) Accepts(method, target string) bool {
	if method != http.MethodGet && method != http.MethodPut {
		return false
	}
	_, _, ok := directKey(target)
	return ok
}

// ServeDirect serves r through the key route of its method, unless a
// hand-over has begun (handedOver holds or refuses writes then).
func (d *directKeys) ServeDirect(w http.ResponseWriter, r *apiwire.DirectRequest) bool {
	if d.drain != nil && d.drain.phase.Load() != handOverServing {
		return false
	}
	key, query, ok := directKey(r.Target)
	if !ok {
		return false
	}
	rt := d.api.keyGet
	if r.Method == http.MethodPut {
		rt = d.api.keyPut
		if d.drain != nil {
			// As handedOver.serveAnswered: a write's refusal once a
			// hand-over began names the node taking over.
			answer := d.drain.answer(w, r.Context())
			defer answer.done()
			w = answer
		}
	}
	call := &handlerCall{statusRecorder: statusRecorder{ResponseWriter: w, code: http.StatusOK}}
	call.request = request{direct: r, key: key, query: query, body: r.Body}
	d.api.serve(rt, call)
	return true
}

// directKeyPrefix is the path of the key routes before the key.
const directKeyPrefix = "/v1/kv/"

// directKey returns the key and raw query of target when the mux would
// route it to /v1/kv/{key...} with that key and url.URL.RequestURI would
// give it back unchanged (request.requestURI): a path of directKeyPrefix
// then unreserved characters, '/' and %XX escapes (coord's client escapes
// every other byte of a key, '/' included), whose unescaped form has no
// empty, "." or ".." segment (the mux redirects such a path to its cleaned
// form). ok is false for any other target.
func directKey(target string) (key, query string, ok bool) {
	path, query, _ := strings.Cut(target, "?")
	escaped, found := strings.CutPrefix(path, directKeyPrefix)
	if !found || escaped == "" {
		return "", "", false
	}
	escapes := false
	for i := 0; i < len(escaped); i++ {
		switch c := escaped[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '-', c == '.', c == '_', c == '~', c == '/':
		case c == '%' && i+2 < len(escaped) && isHex(escaped[i+1]) && isHex(escaped[i+2]):
			escapes = true
			i += 2
		default:
			return "", "", false
		}
	}
	key = escaped
	if escapes {
		var err error
		if key, err = url.PathUnescape(escaped); err != nil {
			return "", "", false
		}
	}
	for segment := range strings.SplitSeq(key, "/") {
		if segment == "" || segment == "." || segment == ".." {
			return "", "", false
		}
	}
	return key, query, true
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}
