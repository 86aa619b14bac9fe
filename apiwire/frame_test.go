package apiwire

import (
	"net/http"
	"reflect"
	"testing"
)

// A request frame decodes to what was sent: headers canonicalized,
// repeated ones in order, values intact, the body aliasing the payload,
// and a decoded Header that its handler may change without touching the
// other headers (their values share one array).
func TestDecodeRequestHeaders(t *testing.T) {
	h := http.Header{
		"Authorization":  {"Bearer abc"},
		"Content-Type":   {"application/json"},
		"Coord-Trace":    {"1", "2"},
		"Coord-Empty":    {""},
		"X-Not-Carried":  {"dropped"},
		"Accept":         {"text/event-stream"},
		"Last-Event-Id":  {"42"},
		"Coord-Other-Id": {"x"},
	}
	frame, err := appendRequest(nil, 1, "PUT", "/v1/kv/a?client_id=3&seq=1", h, []byte("value"), DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	rf, err := DecodeRequest(frame[frameHeaderBytes:], DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	want := h.Clone()
	delete(want, "X-Not-Carried")
	if rf.Method != "PUT" || rf.Target != "/v1/kv/a?client_id=3&seq=1" || string(rf.Body) != "value" || !reflect.DeepEqual(rf.Header, want) {
		t.Fatalf("decoded %q %q %q %v, want PUT, the target, value and %v", rf.Method, rf.Target, rf.Body, rf.Header, want)
	}
	rf.Header.Add("Authorization", "second")
	rf.Header.Set("Content-Type", "text/plain")
	if got := rf.Header["Coord-Trace"]; !reflect.DeepEqual(got, []string{"1", "2"}) {
		t.Fatalf("Coord-Trace %q after changing other headers", got)
	}
	if got := rf.Header["Authorization"]; !reflect.DeepEqual(got, []string{"Bearer abc", "second"}) {
		t.Fatalf("Authorization %q", got)
	}

	// A name sent in lower case is canonicalized, as net/http does.
	lower := []byte{3, 'G', 'E', 'T', 0, 1, '/', 1, 13}
	lower = append(lower, "authorization"...)
	lower = append(lower, 0, 1, 'x')
	rf, err = DecodeRequest(lower, DefaultLimits())
	if err != nil || rf.Header.Get("Authorization") != "x" {
		t.Fatalf("lower-case name: %v %v", rf.Header, err)
	}
}

// Decoding a request allocates a fixed few times, not once per header
// name and value (issue 21: the leader decodes every request).
func TestDecodeRequestAllocations(t *testing.T) {
	h := http.Header{"Authorization": {"Bearer abc"}, "Content-Type": {"application/json"}, "Coord-Trace": {"1"}}
	frame, err := appendRequest(nil, 1, "PUT", "/v1/kv/a", h, []byte("value"), DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	payload := frame[frameHeaderBytes:]
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := DecodeRequest(payload, DefaultLimits()); err != nil {
			t.Fatal(err)
		}
	})
	// The string of method, target and headers, the map (and its
	// table), the values' array.
	if allocs > 4 {
		t.Fatalf("DecodeRequest of 3 headers: %.0f allocations, want 4 at most", allocs)
	}
}
