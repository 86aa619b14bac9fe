package server

import (
	"fmt"
	"testing"
)

// The streams of one key share its event at a revision; another revision,
// another key, or a lease (whose event carries the time left) is made
// afresh, and an older event never replaces a newer one.
func TestEventFramesShareAKeysEventAtOneRevision(t *testing.T) {
	var f eventFrames
	key, other, lease := Watched{Name: "a"}, Watched{Name: "b"}, Watched{Lease: true, Name: "a"}
	if _, ok := f.get(key, 5); ok {
		t.Fatal("an empty cache returned an event")
	}
	f.put(key, 5, []byte("a@5"))
	f.put(lease, 5, []byte("lease a@5"))
	if got, ok := f.get(key, 5); !ok || string(got) != "a@5" {
		t.Fatalf("get(a, 5) = %q, %v; want the event put", got, ok)
	}
	for _, miss := range []struct {
		what Watched
		rev  uint64
	}{{key, 6}, {key, 4}, {other, 5}, {lease, 5}} {
		if got, ok := f.get(miss.what, miss.rev); ok {
			t.Errorf("get(%+v, %d) = %q; want nothing", miss.what, miss.rev, got)
		}
	}
	f.put(key, 7, []byte("a@7"))
	f.put(key, 6, []byte("a@6")) // a slower stream, late
	if got, ok := f.get(key, 7); !ok || string(got) != "a@7" {
		t.Fatalf("get(a, 7) = %q, %v after a late put of 6; want a@7 kept", got, ok)
	}
}

// The cache is bounded: past eventFramesMax keys it starts afresh, and
// goes on sharing.
func TestEventFramesStayBounded(t *testing.T) {
	var f eventFrames
	for i := range 3 * eventFramesMax {
		f.put(Watched{Name: fmt.Sprint(i)}, 1, []byte("x"))
	}
	if n := len(f.frames); n > eventFramesMax {
		t.Fatalf("%d keys kept, want at most %d", n, eventFramesMax)
	}
	last := Watched{Name: fmt.Sprint(3*eventFramesMax - 1)}
	if _, ok := f.get(last, 1); !ok {
		t.Fatal("the last event put is gone")
	}
}
