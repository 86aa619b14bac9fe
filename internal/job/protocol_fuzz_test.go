//go:build linux

package job

import (
	"errors"
	"strings"
	"testing"
)

// FuzzParseMessage feeds arbitrary lines, as the shim and its parent read
// them from each other's pipe, to parseMessage: never a panic, an error
// wraps errProtocol, and a message it accepts formats (String) to a line
// that parses to the same message; a number has one spelling, so a line
// without free text is exactly what String writes.
func FuzzParseMessage(f *testing.F) {
	for _, m := range []message{
		{kind: msgStarted}, {kind: msgContinued}, {kind: msgExpired},
		{kind: msgFailed, number: 127, text: "exec: \"nope\": executable file not found in $PATH"},
		{kind: msgFailed, number: 126, text: ""},
		{kind: msgStopped, number: 19}, {kind: msgSignaled, number: 9},
		{kind: msgExited, number: 0}, {kind: msgExited, number: 255},
		{kind: msgDeadline, number: 123456789},
	} {
		f.Add(m.String())
	}
	for _, bad := range []string{"", "started now", "failed 1 x", "failed x", "stopped 0", "stopped 65",
		"exited 256", "exited -1", "exited +5", "exited 05", "exited -0", "deadline -1", "deadline", "exploded 1"} {
		f.Add(bad)
	}
	f.Fuzz(func(t *testing.T, line string) {
		m, err := parseMessage(line)
		if err != nil {
			if !errors.Is(err, errProtocol) {
				t.Fatalf("parseMessage(%q): error %v does not wrap errProtocol", line, err)
			}
			return
		}
		again, err := parseMessage(m.String())
		if err != nil || again != m {
			t.Fatalf("parseMessage(%q) = %+v, formatted %q, parsed again %+v, %v", line, m, m.String(), again, err)
		}
		if m.kind != msgFailed && m.String() != line {
			t.Fatalf("parseMessage(%q) = %+v, which is written %q", line, m, m.String())
		}
		if m.kind == msgFailed && !strings.HasPrefix(line, m.String()[:len("failed 12x")]) {
			t.Fatalf("parseMessage(%q) = %+v, which is written %q", line, m, m.String())
		}
	})
}
