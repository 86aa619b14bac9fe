package leasekittest

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"coord/lease"
)

// holderEnv carries "URL\tNAME\tTTL" to a holder process.
const holderEnv = "COORD_LEASEKITTEST_HOLDER"

// HolderMain turns the test binary into a lease holder when the test that
// started it asked for one, and returns otherwise. Call it first thing in
// TestMain of a backend's tests (whose package registers the backend):
//
//	func TestMain(m *testing.M) { leasekittest.HolderMain(); os.Exit(m.Run()) }
//
// The holder opens the store, acquires the lease (retrying while it is
// held), prints "token N" on stdout, then renews every TTL/3 until it is
// killed. It exits 1 if renewing fails.
func HolderMain() {
	spec, ok := os.LookupEnv(holderEnv)
	if !ok {
		return
	}
	parts := strings.Split(spec, "\t")
	if len(parts) != 3 {
		fmt.Fprintf(os.Stderr, "holder: bad %s %q\n", holderEnv, spec)
		os.Exit(2)
	}
	ttl, err := time.ParseDuration(parts[2])
	if err != nil {
		fmt.Fprintf(os.Stderr, "holder: %v\n", err)
		os.Exit(2)
	}
	os.Exit(hold(parts[0], parts[1], ttl))
}

func hold(url, name string, ttl time.Duration) int {
	ctx := context.Background()
	b, err := lease.Open(ctx, url)
	if err != nil {
		fmt.Fprintf(os.Stderr, "holder: %v\n", err)
		return 1
	}
	holder := fmt.Sprintf("holder-%d", os.Getpid())
	var rec lease.Record
	for start := time.Now(); ; {
		rec, err = b.Acquire(ctx, name, holder, ttl)
		if err == nil {
			break
		}
		if time.Since(start) > time.Minute {
			fmt.Fprintf(os.Stderr, "holder: acquire: %v\n", err)
			return 1
		}
		time.Sleep(50 * time.Millisecond) // a retry period, not a wait for a state
	}
	fmt.Printf("token %d\n", rec.Token)
	for {
		time.Sleep(ttl / 3) // the renew interval
		if _, err := b.Renew(ctx, name, holder, rec.Token, ttl); err != nil {
			fmt.Fprintf(os.Stderr, "holder: renew: %v\n", err)
			return 1
		}
	}
}

// Holder is a lease holder running in its own OS process.
type Holder struct {
	// Token is the fencing token the holder acquired.
	Token uint64

	cmd *exec.Cmd
}

// StartHolder starts the test binary as a holder of name in the store at
// url (see HolderMain) and waits until it has acquired the lease. The
// process is killed when the test ends, if it has not been already.
func StartHolder(t testing.TB, url, name string, ttl time.Duration) *Holder {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), holderEnv+"="+url+"\t"+name+"\t"+ttl.String())
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h := &Holder{cmd: cmd}
	t.Cleanup(func() { h.Kill() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("holder process: no token line: %v", err)
	}
	token, err := strconv.ParseUint(strings.TrimSpace(strings.TrimPrefix(line, "token ")), 10, 64)
	if err != nil {
		t.Fatalf("holder process: bad token line %q", line)
	}
	h.Token = token
	return h
}

// Kill sends SIGKILL to the holder and waits for it to die.
func (h *Holder) Kill() {
	if h.cmd.ProcessState != nil {
		return
	}
	_ = h.cmd.Process.Kill()
	_ = h.cmd.Wait()
}
