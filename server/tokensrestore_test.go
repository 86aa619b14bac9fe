package server

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
)

// A snapshot of more than the stream decoder's read-ahead (64 KiB) restores
// its tokens wherever the tokens section falls. The token count was
// checked against the bytes the decoder had read ahead (Rest) rather than
// those left in the snapshot (Left): when the section began near the end
// of the read-ahead, a valid snapshot with more tokens than bytes still
// buffered was refused as malformed, and a node could not restart on it or
// take it from its leader. The last key's value moves the end of the
// sections before the tokens, a byte at a time, across the read-ahead's
// end.
func TestSnapshotTokensRestoreAcrossTheReadAhead(t *testing.T) {
	const readAhead = 64 << 10 // wire's streamWindow
	a := newApplier(t)
	a.want(TokenBootstrapCommand(Token{Hash: HashToken("boot"), Role: TokenAdmin}), StatusOK)
	for i := range 63 {
		a.want(TokenCreateCommand(Token{Hash: HashToken(fmt.Sprint("t", i)), Role: TokenRead, Name: fmt.Sprint("t", i)}), StatusOK)
	}
	for i := range 500 { // about 50 KB of keys before "pad", the last
		a.want(Command{Op: OpPut, Key: fmt.Sprintf("k/%04d", i), Value: []byte(strings.Repeat("v", 90))}, StatusOK)
	}
	// padEnd returns where the value of "pad" ends in the snapshot.
	padEnd := func(length int) int {
		value := []byte(strings.Repeat("p", length))
		a.want(Command{Op: OpPut, Key: "pad", Value: value}, StatusOK)
		return bytes.Index(a.m.Snapshot(), value) + length
	}
	first := 1000
	end := padEnd(first)
	// From 100 bytes before the read-ahead's end to just past it (the
	// value's length takes two bytes throughout).
	for length := first + readAhead - 100 - end; length <= first+readAhead-end; length++ {
		padEnd(length)
		m := NewMachine(DefaultLimits())
		if err := m.Restore(a.m.Snapshot()); err != nil {
			t.Fatalf("pad of %d bytes: restore of a valid snapshot of %d bytes: %v", length, len(a.m.Snapshot()), err)
		}
		if fmt.Sprint(m.Tokens()) != fmt.Sprint(a.m.Tokens()) {
			t.Fatalf("pad of %d bytes: tokens %v, want %v", length, m.Tokens(), a.m.Tokens())
		}
	}
}
