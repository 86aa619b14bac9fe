package apiwire

import (
	"bytes"
	"errors"
	"net/http"
	"reflect"
	"testing"
)

// fuzzLimits are small, so that the fuzzer reaches every limit.
var fuzzLimits = Limits{FrameBytesMax: 1 << 12, StreamsMax: 4, HeadersMax: 4, HeaderBytesMax: 256}

// travelling returns the part of h that a sender passes on (appendHeaders):
// every value of a Coord-* header, the first of one in fixed, nothing
// else.
func travelling(h http.Header, fixed []string) http.Header {
	out := http.Header{}
	for name, values := range h {
		switch {
		case len(name) > 6 && name[:6] == "Coord-":
			out[name] = values
		case travels(name, fixed):
			out[name] = values[:1]
		}
	}
	return out
}

// payloadOf returns the payload of the one frame in b.
func payloadOf(b []byte) []byte { return b[frameHeaderBytes:] }

// FuzzDecodeRequest feeds a request frame's payload, as a client sends it,
// to DecodeRequest: it returns errors wrapping ErrMalformed, never panics,
// never returns more headers than the limit, and a request it accepts
// encodes again (appendRequest) to one that decodes the same.
func FuzzDecodeRequest(f *testing.F) {
	seed := func(method, target string, h http.Header, body string) []byte {
		b, err := appendRequest(nil, 1, method, target, h, []byte(body), fuzzLimits)
		if err != nil {
			f.Fatal(err)
		}
		return payloadOf(b)
	}
	valid := seed("PUT", "/v1/kv/a?x=1", http.Header{"Authorization": {"Bearer t"}, "Coord-Session": {"1", "2"}}, "value")
	f.Add(valid)
	f.Add(seed("GET", "/", nil, ""))
	f.Add(valid[:len(valid)-7])                              // cut inside the headers
	f.Add(valid[:3])                                         // cut inside the target's length
	f.Add(append([]byte{3, 'G', 'E', 'T', 0, 1, '/', 5}, 0)) // more headers than the limit
	for _, at := range []int{0, 1, 5, 8} {                   // flipped bits: lengths, method, target
		b := bytes.Clone(valid)
		b[at] ^= 0x41
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, payload []byte) {
		rf, err := DecodeRequest(payload, fuzzLimits)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		if len(rf.Header) > fuzzLimits.HeadersMax {
			t.Fatalf("%d headers decoded past the limit of %d", len(rf.Header), fuzzLimits.HeadersMax)
		}
		want := travelling(rf.Header, RequestHeaders)
		b, err := appendRequest(nil, 1, rf.Method, rf.Target, want, rf.Body, DefaultLimits())
		if err != nil {
			t.Fatalf("re-encode of %+v: %v", rf, err)
		}
		again, err := DecodeRequest(payloadOf(b), DefaultLimits())
		if err != nil || again.Method != rf.Method || again.Target != rf.Target || !bytes.Equal(again.Body, rf.Body) ||
			!reflect.DeepEqual(again.Header, want) {
			t.Fatalf("re-decode: %+v (%v), want %+v with headers %v", again, err, rf, want)
		}
	})
}

// FuzzDecodeHead does the same for an answer's head frame, as a client
// reads it from the server: errors, never a panic, and a round trip
// through appendHead.
func FuzzDecodeHead(f *testing.F) {
	valid, err := appendHead(nil, 1, 200, http.Header{"Content-Type": {"application/json"}, "Coord-Leader": {"1"}}, fuzzLimits)
	if err != nil {
		f.Fatal(err)
	}
	valid = payloadOf(valid)
	f.Add(valid)
	f.Add(valid[:len(valid)-1])
	f.Add(append(bytes.Clone(valid), 0)) // a byte after the headers
	f.Add([]byte{0, 99, 0})              // a status below 100
	f.Fuzz(func(t *testing.T, payload []byte) {
		status, h, err := decodeHead(payload, fuzzLimits)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		want := travelling(h, ResponseHeaders)
		b, err := appendHead(nil, 1, status, want, DefaultLimits())
		if err != nil {
			t.Fatalf("re-encode of %d %v: %v", status, want, err)
		}
		again, h2, err := decodeHead(payloadOf(b), DefaultLimits())
		if err != nil || again != status || !reflect.DeepEqual(h2, want) {
			t.Fatalf("re-decode: %d %v (%v), want %d %v", again, h2, err, status, want)
		}
	})
}
