package leasekittest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// The tests run this test binary itself as the server process: with the
// first argument serveArg it listens on the port in the second and accepts
// until killed; with exitArg it prints to stderr and exits 3 at once; with
// silentArg it never listens.
const (
	serveArg  = "leasekittest-serve"
	exitArg   = "leasekittest-exit"
	silentArg = "leasekittest-silent"
)

func TestMain(m *testing.M) {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case serveArg:
			serve(os.Args[2])
		case exitArg:
			fmt.Fprintln(os.Stderr, "boom: no such data directory")
			os.Exit(3)
		case silentArg:
			fmt.Println("starting, slowly")
			select {}
		}
	}
	os.Exit(m.Run())
}

func serve(port string) {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", port))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println("listening on", l.Addr())
	for {
		c, err := l.Accept()
		if err != nil {
			os.Exit(1)
		}
		c.Close()
	}
}

func dial(addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err == nil {
		c.Close()
	}
	return err
}

// A server is up when StartServer returns, down after Kill, and up again,
// on the same port, after Restart; Ready is asked until it says yes.
func TestServerKillRestart(t *testing.T) {
	port := FreePort(t)
	probes := 0
	ready := func(ctx context.Context) error {
		probes++
		if probes%3 != 0 {
			return errors.New("not yet")
		}
		return nil
	}
	s := StartServer(t, ServerOptions{Port: port, Ready: ready}, os.Args[0], serveArg, fmt.Sprint(port))
	if probes != 3 {
		t.Fatalf("Ready probes before the first start returned: got %d, want 3", probes)
	}
	if dial(s.Addr()) != nil {
		t.Fatal("server not up after StartServer")
	}

	s.Kill()
	if dial(s.Addr()) == nil {
		t.Fatalf("server still accepting on %s after Kill", s.Addr())
	}
	s.Kill() // a second Kill does nothing

	s.Restart()
	if probes != 6 {
		t.Fatalf("Ready probes after Restart: got %d, want 6", probes)
	}
	if dial(s.Addr()) != nil {
		t.Fatal("server not up after Restart")
	}
}

// StartServer's failures are reported by a child test process (a t.Fatal
// cannot be caught in the test that calls it): run the helper test named
// name and return its output, checking that it failed.
func runFailing(t *testing.T, name string) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+name+"$", "-test.v")
	cmd.Env = append(os.Environ(), "LEASEKITTEST_HELPER=1")
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		t.Fatalf("helper %s did not fail: %v\n%s", name, err, out)
	}
	return string(out)
}

// helper skips a helper test unless runFailing runs it.
func helper(t *testing.T) {
	if os.Getenv("LEASEKITTEST_HELPER") == "" {
		t.Skip("a helper of TestStartServerFailures, failing on purpose")
	}
}

func TestHelperServerExits(t *testing.T) {
	helper(t)
	port := FreePort(t)
	StartServer(t, ServerOptions{Port: port}, os.Args[0], exitArg)
}

func TestHelperServerSilent(t *testing.T) {
	helper(t)
	port := FreePort(t)
	// Long enough for the helper process to have printed its line on a
	// loaded machine (300 ms was not: CI saw "(no output)").
	StartServer(t, ServerOptions{Port: port, StartTimeout: 3 * time.Second}, os.Args[0], silentArg)
}

// A server that exits before it is up, or is not up in time, fails the
// test with a message that says so and ends with the server's output; a
// missing port is refused.
func TestStartServerFailures(t *testing.T) {
	out := runFailing(t, "TestHelperServerExits")
	if !(strings.Contains(out, "exited (exit status 3) before it was up") && strings.Contains(out, "boom: no such data directory")) {
		t.Fatalf("failure message of a server that exits:\n%s", out)
	}
	out = runFailing(t, "TestHelperServerSilent")
	if !(strings.Contains(out, "was not up on 127.0.0.1:") && strings.Contains(out, "within 3s") && strings.Contains(out, "starting, slowly")) {
		t.Fatalf("failure message of a server that never listens:\n%s", out)
	}
	out = runFailing(t, "TestHelperNoPort")
	if !strings.Contains(out, "port 0 is not positive") {
		t.Fatalf("failure message without a port:\n%s", out)
	}
}

func TestHelperNoPort(t *testing.T) {
	helper(t)
	StartServer(t, ServerOptions{}, os.Args[0], serveArg, "0")
}

// The tail keeps the end of what is written, and says when there is none.
func TestTailKeepsTheEnd(t *testing.T) {
	w := &tail{max: 8}
	if got, want := w.String(), "(no output)"; got != want {
		t.Fatalf("empty tail: got %q, want %q", got, want)
	}
	fmt.Fprint(w, "0123456789")
	fmt.Fprint(w, "abc")
	if got, want := w.String(), "56789abc"; got != want {
		t.Fatalf("the last 8 of 13 bytes: got %q, want %q", got, want)
	}
}
