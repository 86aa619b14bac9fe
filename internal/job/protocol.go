//go:build linux

package job

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// The shim and its parent talk over two pipes, one text line per message.
// Both sides are one program, but a line is still input: it is parsed
// strictly and a bad one is an error, never a panic.
//
// Status, shim to parent (the shim's fd 3):
//
//	started           CMD was executed
//	failed CODE TEXT  CMD could not be executed: CODE is 127 (not found) or
//	                  126 (not executable), TEXT says why
//	stopped SIGNO     CMD was stopped by signal SIGNO (job control)
//	continued         CMD was continued
//	exited CODE       CMD exited with status CODE
//	signaled SIGNO    CMD was killed by signal SIGNO
//	expired           the deadline passed, so the shim killed the job
//
// Control, parent to shim (the shim's fd 4):
//
//	deadline MONO_NS  kill the job at CLOCK_MONOTONIC MONO_NS unless a later
//	                  deadline arrives first
//	end of file       the parent died or wants the job dead: kill every
//	                  process of the job, then exit
const (
	msgStarted   = "started"
	msgFailed    = "failed"
	msgStopped   = "stopped"
	msgContinued = "continued"
	msgExited    = "exited"
	msgSignaled  = "signaled"
	msgExpired   = "expired"
	msgDeadline  = "deadline"
)

// lineBytesMax bounds one protocol line.
const lineBytesMax = 512

// errProtocol marks a line that breaks the protocol.
var errProtocol = errors.New("job: protocol")

// message is one parsed protocol line.
type message struct {
	kind   string
	number int64  // CODE, SIGNO or MONO_NS
	text   string // TEXT of failed
}

// String formats m as its protocol line, without the newline.
func (m message) String() string {
	switch m.kind {
	case msgStarted, msgContinued, msgExpired:
		return m.kind
	case msgFailed:
		return fmt.Sprintf("%s %d %s", m.kind, m.number, strings.ReplaceAll(m.text, "\n", " "))
	default:
		return fmt.Sprintf("%s %d", m.kind, m.number)
	}
}

// parseMessage parses one protocol line (without its newline).
func parseMessage(line string) (message, error) {
	if strings.IndexByte(line, '\n') >= 0 {
		// A line read never holds one; String writes failed's text
		// without them.
		return message{}, fmt.Errorf("%w: a line break inside %q", errProtocol, line)
	}
	kind, rest, _ := strings.Cut(line, " ")
	m := message{kind: kind}
	switch kind {
	case msgStarted, msgContinued, msgExpired:
		if rest != "" {
			return message{}, fmt.Errorf("%w: %q takes no argument: %q", errProtocol, kind, line)
		}
		return m, nil
	case msgFailed:
		code, text, _ := strings.Cut(rest, " ")
		n, err := parseNumber(code)
		if err != nil || (n != 126 && n != 127) {
			return message{}, fmt.Errorf("%w: bad exit code in %q", errProtocol, line)
		}
		m.number, m.text = n, text
		return m, nil
	case msgStopped, msgSignaled:
		n, err := parseNumber(rest)
		if err != nil || n < 1 || n > 64 {
			return message{}, fmt.Errorf("%w: bad signal number in %q", errProtocol, line)
		}
		m.number = n
		return m, nil
	case msgExited:
		n, err := parseNumber(rest)
		if err != nil || n < 0 || n > 255 {
			return message{}, fmt.Errorf("%w: bad exit status in %q", errProtocol, line)
		}
		m.number = n
		return m, nil
	case msgDeadline:
		n, err := parseNumber(rest)
		if err != nil || n < 0 {
			return message{}, fmt.Errorf("%w: bad deadline in %q", errProtocol, line)
		}
		m.number = n
		return m, nil
	}
	return message{}, fmt.Errorf("%w: unknown message %q", errProtocol, line)
}

// parseNumber parses a decimal number as String writes it: no sign but
// '-', no leading zeros, so that each number has one spelling.
func parseNumber(s string) (int64, error) {
	n, err := strconv.ParseInt(s, 10, 64)
	if err == nil && strconv.FormatInt(n, 10) != s {
		return 0, fmt.Errorf("%q is not a number in canonical form", s)
	}
	return n, err
}

// readMessages calls fn with every message read from r until end of file
// (nil) or a read or protocol error (returned).
func readMessages(r io.Reader, fn func(message)) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, lineBytesMax), lineBytesMax)
	for sc.Scan() {
		m, err := parseMessage(sc.Text())
		if err != nil {
			return err
		}
		fn(m)
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("%w: %v", errProtocol, err)
	}
	return nil
}

// writeMessage writes m as one line. A pipe write of at most PIPE_BUF
// bytes is atomic, so lines never interleave.
func writeMessage(w io.Writer, m message) error {
	line := m.String()
	if len(line) >= lineBytesMax {
		line = line[:lineBytesMax-1]
	}
	_, err := io.WriteString(w, line+"\n")
	return err
}

// signalName returns the conventional name of sig ("SIGTERM").
func signalName(sig syscall.Signal) string {
	if name := unix.SignalName(sig); name != "" {
		return name
	}
	return "signal " + strconv.Itoa(int(sig))
}
