//go:build linux

package processes

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"coord/lab/articles"
	"coord/lease"
	"coord/lease/eventlog"
	"coord/lease/fence"
)

// The lab children of this package: coord's one-shot acquire, the articles'
// lease program behind a start line, and a leader that writes to a fenced
// resource.
const (
	childContend       = "processes/contend"
	childArticlesLease = "processes/articles-lease"
	childFencedLeader  = "processes/fenced-leader"
)

// Events the children print beyond lease's and the articles' own.
const (
	eventNotElected = articles.EventNotElected
	eventError      = "error"
	eventWrite      = "write" // a fenced write; Detail "accepted" or "rejected"
	eventReady      = "ready" // a process reached the start line
)

func childFlags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(os.Stderr)
	return fs
}

// contendChild tries once to become leader, by one of three methods: the
// articles' stat-then-create or O_EXCL (lab/articles, bugs included), or
// coord's Acquire. With --gate it first prints a ready event and waits at
// the start line. It prints one event (elected, not-elected, or error) and
// stays alive for --hold, so that every contender of a trial is alive when
// the leaders are counted.
func contendChild(args []string) int {
	fs := childFlags(childContend)
	method := fs.String("method", "", "stat-create, exclusive or coord")
	path := fs.String("path", "", "lock file")
	id := fs.String("id", "", "holder identity (coord)")
	ttl := fs.Duration("ttl", 9*time.Second, "lease TTL (coord)")
	gate := fs.String("gate", "", "start line: a FIFO to wait on")
	hold := fs.Duration("hold", 0, "stay alive this long afterwards")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *path == "" || *id == "" || (*method != "stat-create" && *method != "exclusive" && *method != "coord") {
		fmt.Fprintf(os.Stderr, "%s: --path, --id and --method stat-create|exclusive|coord are required\n", childContend)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	out := eventlog.NewWriter(os.Stdout, *id)
	var b lease.Backend
	if *method == "coord" {
		// Open before the start line: the race is the acquire, not the open.
		var err error
		if b, err = lease.Open(ctx, "file://"+*path); err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", childContend, err)
			return 1
		}
		defer b.Close()
	}
	if err := waitAtGate(out, *gate); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", childContend, err)
		return 1
	}
	switch *method {
	case "stat-create", "exclusive":
		cfg := articles.OneShotConfig{Path: *path, Hold: *hold, Out: articles.Output{Events: out}}
		run := articles.StatCreate
		if *method == "exclusive" {
			run = articles.Exclusive
		}
		if _, err := run(ctx, cfg); err != nil {
			out.Write(lease.Event{Event: eventError, Error: err.Error()})
		}
		return 0
	}
	actx, cancel := context.WithTimeout(ctx, 10*time.Second)
	rec, err := b.Acquire(actx, lease.DefaultName(b, "coord"), *id, *ttl)
	cancel()
	switch {
	case err == nil:
		out.Write(lease.Event{Event: lease.EventElected, Holder: *id, Token: rec.Token, Expiry: rec.Expiry})
	case errors.Is(err, lease.ErrHeld):
		out.Write(lease.Event{Event: eventNotElected, Holder: rec.Holder, Token: rec.Token})
	default:
		out.Write(lease.Event{Event: eventError, Error: err.Error()})
	}
	select {
	case <-ctx.Done():
	case <-time.After(*hold):
	}
	return 0
}

// waitAtGate prints a ready event and blocks until the lab opens the FIFO at
// path for writing, which releases every waiting process at once. No path,
// no wait.
func waitAtGate(out *eventlog.Writer, path string) error {
	if path == "" {
		return nil
	}
	out.Write(lease.Event{Event: eventReady})
	f, err := os.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return fmt.Errorf("start line: %w", err)
	}
	return f.Close()
}

// startLine is a FIFO that processes wait on (waitAtGate) until the lab
// opens it: the kernel wakes every reader blocked in open(2) together.
type startLine struct {
	path   string
	writer *os.File // held open after the release, so that a late reader passes at once
}

func newStartLine(dir string) (*startLine, error) {
	path := filepath.Join(dir, "start.fifo")
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		return nil, fmt.Errorf("processes: start line: %w", err)
	}
	return &startLine{path: path}, nil
}

// release waits until n ready events have arrived in g (or a timeout), then
// opens the FIFO for writing, releasing every waiting process. It returns
// how many were ready. The write end stays open until close: a process that
// printed ready but had not yet reached open(2) passes straight through
// instead of waiting forever.
func (s *startLine) release(ctx context.Context, g *group, n int) (int, error) {
	count := func(events []event) int {
		ready := 0
		for _, e := range events {
			if e.Event.Event == eventReady {
				ready++
			}
		}
		return ready
	}
	g.waitFor(ctx, 60*time.Second, func(events []event) bool { return count(events) >= n })
	ready := count(g.snapshot())
	if ready == 0 {
		return 0, fmt.Errorf("processes: no process reached the start line")
	}
	// Ready is printed just before open(2); give the last one a moment
	// to get there.
	time.Sleep(20 * time.Millisecond)
	// A reader is blocked in open, so this open does not block.
	f, err := os.OpenFile(s.path, os.O_WRONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return ready, fmt.Errorf("processes: open the start line: %w", err)
	}
	s.writer = f
	return ready, nil
}

// close closes the write end, if release opened it.
func (s *startLine) close() {
	if s.writer != nil {
		s.writer.Close()
	}
}

// articlesLeaseChild runs the articles' lease program (lab/articles, bugs
// included) from a given instant, so that many processes tick together.
// `coord articles lease` is the same program without the start line.
func articlesLeaseChild(args []string) int {
	fs := childFlags(childArticlesLease)
	path := fs.String("path", "", "lock file")
	gate := fs.String("gate", "", "start line: a FIFO to wait on")
	leaseFor := fs.Duration("lease", articles.LeaseDuration, "LEASE_DURATION")
	renew := fs.Duration("renew", articles.RenewInterval, "RENEW_INTERVAL")
	watch := fs.Duration("watch", articles.WatchInterval, "WATCH_INTERVAL")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *path == "" {
		fmt.Fprintf(os.Stderr, "%s: --path is required\n", childArticlesLease)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	events := eventlog.NewWriter(os.Stdout, strconv.Itoa(os.Getpid()))
	if err := waitAtGate(events, *gate); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", childArticlesLease, err)
		return 1
	}
	out := articles.Output{Lines: os.Stderr, Events: events}
	err := articles.Lease(ctx, articles.LeaseConfig{Path: *path, LeaseDuration: *leaseFor, RenewInterval: *renew, WatchInterval: *watch, Out: out})
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", childArticlesLease, err)
		return 1
	}
	return 0
}

// fencedLeaderChild campaigns for a lease with coord's Elector and, while
// it leads, writes to a fenced resource (a unix socket served by the lab)
// with its fencing token: check that it still leads, do the work (sleep
// --interval), write. A pause that lands during the work, as SIGSTOP
// almost always does, sends one write with a token that is no longer
// current; the resource must reject it.
func fencedLeaderChild(args []string) int {
	fs := childFlags(childFencedLeader)
	store := fs.String("store", "", "lease store URL")
	id := fs.String("id", "", "holder identity")
	ttl := fs.Duration("ttl", 3*time.Second, "lease TTL")
	socket := fs.String("socket", "", "the fenced resource's unix socket")
	interval := fs.Duration("interval", 20*time.Millisecond, "time between writes")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *store == "" || *id == "" || *socket == "" || *interval <= 0 {
		fmt.Fprintf(os.Stderr, "%s: --store, --id, --socket and a positive --interval are required\n", childFencedLeader)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	b, err := lease.Open(ctx, *store)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", childFencedLeader, err)
		return 1
	}
	defer b.Close()
	out := eventlog.NewWriter(os.Stdout, *id)
	cfg := lease.ScaledConfig(*ttl)
	cfg.Name, cfg.Holder = lease.DefaultName(b, "coord"), *id
	cfg.Callbacks = lease.Callbacks{
		OnElected: func(ctx context.Context, token uint64) {
			out.Write(lease.Event{Event: lease.EventElected, Holder: *id, Token: token})
			writeWhileLeading(ctx, out, *socket, *id, token, *interval)
		},
		OnRenewed: func(r lease.Record) {
			out.Write(lease.Event{Event: lease.EventRenewed, Holder: *id, Token: r.Token, Expiry: r.Expiry})
		},
		OnLost: func(token uint64, err error) {
			ev := lease.Event{Event: lease.EventReleased, Holder: *id, Token: token}
			if err != nil {
				ev.Event, ev.Error = lease.EventLost, err.Error()
			}
			out.Write(ev)
		},
		OnLeaderChanged: func(r lease.Record) {
			if r.Holder != "" && r.Holder != *id {
				out.Write(lease.Event{Event: lease.EventLeader, Holder: r.Holder, Token: r.Token})
			}
		},
	}
	e, err := lease.NewElector(b, cfg)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", childFencedLeader, err)
		return 2
	}
	if err := e.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintf(os.Stderr, "%s: %v\n", childFencedLeader, err)
		return 1
	}
	return 0
}

// writeWhileLeading is the leader's work loop.
func writeWhileLeading(ctx context.Context, out *eventlog.Writer, socket, id string, token uint64, interval time.Duration) {
	conn, err := net.Dial("unix", socket)
	if err != nil {
		out.Write(lease.Event{Event: eventError, Error: err.Error()})
		return
	}
	defer conn.Close()
	replies := bufio.NewReader(conn)
	for ctx.Err() == nil {
		time.Sleep(interval) // the work; a pause here outlives the lease
		if _, err := fmt.Fprintf(conn, "%d %s\n", token, id); err != nil {
			return
		}
		reply, err := replies.ReadString('\n')
		if err != nil {
			return
		}
		detail := "accepted"
		if strings.TrimSpace(reply) != "ok" {
			detail = "rejected"
		}
		out.Write(lease.Event{Event: eventWrite, Holder: id, Token: token, Detail: detail})
	}
}

// resourceServer serves a fence.Resource on a unix socket: each
// line "TOKEN HOLDER" is a write, answered "ok" or "stale".
type resourceServer struct {
	resource fence.Resource
	ln       net.Listener
	done     chan struct{}
}

func serveResource(path string) (*resourceServer, error) {
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("processes: fenced resource: %w", err)
	}
	s := &resourceServer{ln: ln, done: make(chan struct{})}
	go s.accept()
	return s, nil
}

func (s *resourceServer) accept() {
	defer close(s.done)
	for {
		conn, err := s.ln.Accept()
		if err != nil {
			return
		}
		go s.serve(conn)
	}
}

func (s *resourceServer) serve(conn net.Conn) {
	defer conn.Close()
	sc := bufio.NewScanner(conn)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) != 2 {
			io.WriteString(conn, "bad\n")
			continue
		}
		token, err := strconv.ParseUint(fields[0], 10, 64)
		if err != nil {
			io.WriteString(conn, "bad\n")
			continue
		}
		reply := "ok\n"
		if err := s.resource.Write(token, fields[1]); err != nil {
			reply = "stale\n"
		}
		io.WriteString(conn, reply)
	}
}

func (s *resourceServer) close() {
	s.ln.Close()
	<-s.done
}
