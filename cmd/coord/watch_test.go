package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"coord/internal/leasekit/leasekittest"
	"coord/lease"
	"coord/server/localcluster"
)

// watchStores are the stores coord watch is tried on: the two on this
// machine always, the servers when scripts/test.sh started them.
func watchStores(t *testing.T) map[string]func(t *testing.T) string {
	return map[string]func(t *testing.T) string{
		"file":     func(t *testing.T) string { return "file://" + filepath.Join(t.TempDir(), "leader.lock") },
		"sqlite":   func(t *testing.T) string { return "sqlite://" + filepath.Join(t.TempDir(), "leases.db") },
		"redis":    func(t *testing.T) string { return leasekittest.ServerURL(t, "COORD_TEST_REDIS") },
		"etcd":     func(t *testing.T) string { return leasekittest.ServerURL(t, "COORD_TEST_ETCD") },
		"postgres": func(t *testing.T) string { return leasekittest.ServerURL(t, "COORD_TEST_POSTGRES") },
		"zk":       func(t *testing.T) string { return leasekittest.ServerURL(t, "COORD_TEST_ZOOKEEPER") },
		"raft":     raftStore,
	}
}

// raftStore starts a secure 3-node coord cluster (this test binary serves
// `server`, see TestMain) and returns its raft:// URL with CA and token.
func raftStore(t *testing.T) string {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := localcluster.Start(ctx, localcluster.Config{Nodes: 3, Dir: t.TempDir(), Binary: os.Args[0], Args: []string{"--tick", "20ms"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	if _, err := c.WaitLeader(ctx); err != nil {
		t.Fatal(err)
	}
	sec := c.Security()
	return "raft://" + strings.Join(c.Endpoints(), ",") + "?cacert=" + url.QueryEscape(sec.CA) + "&token_file=" + url.QueryEscape(sec.TokenFile)
}

// startCLI runs `coord ARGS` in-process until the test ends (a command
// that runs until interrupted), and returns its stdout line by line.
func startCLI(t *testing.T, args ...string) <-chan string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	out, w := io.Pipe()
	done := make(chan error, 1)
	go func() {
		root := newRootCmd(w, io.Discard)
		root.SetArgs(args)
		err := root.ExecuteContext(ctx)
		w.CloseWithError(err)
		done <- err
	}()
	lines := make(chan string, 64)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	t.Cleanup(func() {
		cancel()
		go func() { // unblock a command still printing
			for range lines {
			}
		}()
		if err := <-done; err != nil {
			t.Errorf("coord %v: %v", args, err)
		}
	})
	return lines
}

// nextLine waits for the watcher's next line.
func nextLine(t *testing.T, lines <-chan string, want string) map[string]any {
	t.Helper()
	select {
	case line, ok := <-lines:
		if !ok {
			t.Fatalf("coord watch ended; want a %s line", want)
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		if m["change"] != want {
			t.Fatalf("line %q: want change %q", line, want)
		}
		return m
	case <-time.After(30 * time.Second):
		t.Fatalf("no %s line within 30 s", want)
	}
	return nil
}

// coord watch prints every change another participant makes to a lease,
// on every store, and takes no part: the lease it watched is free after
// its holder lets go.
func TestWatchFollowsALeaseOnEveryStore(t *testing.T) {
	for store, url := range watchStores(t) {
		t.Run(store, func(t *testing.T) {
			u := url(t)
			name := leasekittest.Name(t)
			actor, err := lease.Open(context.Background(), u)
			if err != nil {
				t.Fatal(err)
			}
			defer actor.Close()
			lines := startCLI(t, "watch", "--store", u, "--name", name, "--json")
			if first := nextLine(t, lines, "current"); first["holder"] != "" {
				t.Fatalf("first line %v: want the lease free", first)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			rec, err := actor.Acquire(ctx, name, "actor-1", 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			got := nextLine(t, lines, "acquired")
			// A ZooKeeper lease lasts as long as its holder's session,
			// which an observer cannot see: no expiry.
			if got["holder"] != "actor-1" || got["token"] != float64(rec.Token) || (got["expiry"] == nil) != (store == "zk") || got["name"] != name {
				t.Fatalf("acquired line %v: want actor-1 with token %d and an expiry", got, rec.Token)
			}
			if _, err := actor.Renew(ctx, name, "actor-1", rec.Token, 10*time.Second); err != nil {
				t.Fatal(err)
			}
			// etcd, ZooKeeper and a coord cluster renew without touching
			// the record (a keep-alive, a read on the session, a renewal
			// the leader answers without a Raft write): watchers see
			// nothing.
			if store != "etcd" && store != "zk" && store != "raft" {
				if got := nextLine(t, lines, "renewed"); got["token"] != float64(rec.Token) {
					t.Fatalf("renewed line %v", got)
				}
			}
			if err := actor.Release(ctx, name, "actor-1", rec.Token); err != nil {
				t.Fatal(err)
			}
			if got := nextLine(t, lines, "freed"); got["holder"] != "" {
				t.Fatalf("freed line %v", got)
			}
			if r, err := actor.Get(ctx, name); err != nil || !r.Free() {
				t.Fatalf("after the release the lease is %+v (%v): the watcher must not have taken it", r, err)
			}
		})
	}
}

func TestWatchReadableLines(t *testing.T) {
	u := "file://" + filepath.Join(t.TempDir(), "leader.lock")
	actor, err := lease.Open(context.Background(), u)
	if err != nil {
		t.Fatal(err)
	}
	defer actor.Close()
	lines := startCLI(t, "watch", "--store", u)
	read := func() string {
		select {
		case l := <-lines:
			return l
		case <-time.After(30 * time.Second):
			t.Fatal("no line within 30 s")
		}
		return ""
	}
	if l := read(); !strings.HasSuffix(l, "leader.lock: free (last token 0)") {
		t.Fatalf("first line %q", l)
	}
	rec, err := actor.Acquire(context.Background(), "leader.lock", "a", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if l := read(); !strings.Contains(l, fmt.Sprintf("leader.lock: acquired by a, token %d, expires ", rec.Token)) {
		t.Fatalf("acquired line %q", l)
	}
}

func TestWatchUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"watch"},
		{"watch", "--store", "nope://x"},
		{"watch", "--store", "file:///tmp/x", "extra"},
	} {
		if code, _, stderr := runCLI(t, args...); code != exitUsage {
			t.Errorf("%v: exit %d, want %d (stderr %q)", args, code, exitUsage, stderr)
		}
	}
}
