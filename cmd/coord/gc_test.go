package main

import (
	"runtime/debug"
	"testing"
)

func TestServerGCPercent(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))

	t.Setenv("GOGC", "")
	if got := setServerGCPercent(); got != serverGCPercent {
		t.Fatalf("without GOGC: setServerGCPercent() = %d, want %d", got, serverGCPercent)
	}
	if got := debug.SetGCPercent(100); got != serverGCPercent {
		t.Fatalf("without GOGC the runtime's percentage is %d, want %d", got, serverGCPercent)
	}

	// GOGC is the operator's: it stands, whatever the runtime was set to.
	t.Setenv("GOGC", "80")
	debug.SetGCPercent(80) // as the runtime would have parsed it at start
	if got := setServerGCPercent(); got != 80 {
		t.Fatalf("with GOGC=80: setServerGCPercent() = %d, want 80", got)
	}
	if got := debug.SetGCPercent(100); got != 80 {
		t.Fatalf("with GOGC=80 the runtime's percentage is %d, want 80", got)
	}
}
