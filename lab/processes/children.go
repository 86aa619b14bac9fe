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
	"strconv"
	"strings"
	"syscall"
	"time"

	"coord/lab/articles"
	"coord/lease"
	"coord/lease/leasetest"
)

// The lab children of this package: coord's one-shot acquire, the articles'
// lease program behind a start line, and a leader that writes to a fenced
// resource.
const (
	childAcquire       = "processes/acquire"
	childArticlesLease = "processes/articles-lease"
	childFencedLeader  = "processes/fenced-leader"
)

// Events the children print beyond lease's and the articles' own.
const (
	eventNotElected = articles.EventNotElected
	eventError      = "error"
	eventWrite      = "write" // a fenced write; Detail "accepted" or "rejected"
)

// waitUntilTime sleeps until t, if t is set and in the future.
func waitUntilTime(ctx context.Context, t time.Time) {
	if d := time.Until(t); !t.IsZero() && d > 0 {
		select {
		case <-ctx.Done():
		case <-time.After(d):
		}
	}
}

func parseAt(s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	return time.Parse(time.RFC3339Nano, s)
}

func childFlags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(os.Stderr)
	return fs
}

// acquireChild tries once to acquire a lease through coord's backend, at a
// given instant, prints one event (elected with its token, not-elected with
// the holder it found, or error), and stays alive holding it for --hold.
func acquireChild(args []string) int {
	fs := childFlags(childAcquire)
	store := fs.String("store", "", "lease store URL")
	id := fs.String("id", "", "holder identity")
	ttl := fs.Duration("ttl", 9*time.Second, "lease TTL")
	at := fs.String("at", "", "acquire at this instant (RFC 3339)")
	hold := fs.Duration("hold", 0, "stay alive this long afterwards")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	when, err := parseAt(*at)
	if *store == "" || *id == "" || err != nil {
		fmt.Fprintf(os.Stderr, "%s: --store and --id are required, --at must be RFC 3339 (%v)\n", childAcquire, err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	b, err := lease.Open(ctx, *store)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", childAcquire, err)
		return 1
	}
	defer b.Close()
	name := lease.DefaultName(b, "coord")
	out := lease.NewEventWriter(os.Stdout, *id)
	waitUntilTime(ctx, when)
	actx, cancel := context.WithTimeout(ctx, 10*time.Second)
	rec, err := b.Acquire(actx, name, *id, *ttl)
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

// articlesLeaseChild runs the articles' lease program (lab/articles, bugs
// included) from a given instant, so that many processes tick together.
// `coord articles lease` is the same program without the start line.
func articlesLeaseChild(args []string) int {
	fs := childFlags(childArticlesLease)
	path := fs.String("path", "", "lock file")
	at := fs.String("at", "", "start at this instant (RFC 3339)")
	leaseFor := fs.Duration("lease", articles.LeaseDuration, "LEASE_DURATION")
	renew := fs.Duration("renew", articles.RenewInterval, "RENEW_INTERVAL")
	watch := fs.Duration("watch", articles.WatchInterval, "WATCH_INTERVAL")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	when, err := parseAt(*at)
	if *path == "" || err != nil {
		fmt.Fprintf(os.Stderr, "%s: --path is required, --at must be RFC 3339 (%v)\n", childArticlesLease, err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	waitUntilTime(ctx, when)
	out := articles.Output{Lines: os.Stderr, Events: lease.NewEventWriter(os.Stdout, strconv.Itoa(os.Getpid()))}
	err = articles.Lease(ctx, articles.LeaseConfig{Path: *path, LeaseDuration: *leaseFor, RenewInterval: *renew, WatchInterval: *watch, Out: out})
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
	out := lease.NewEventWriter(os.Stdout, *id)
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
func writeWhileLeading(ctx context.Context, out *lease.EventWriter, socket, id string, token uint64, interval time.Duration) {
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

// resourceServer serves a leasetest.FencedResource on a unix socket: each
// line "TOKEN HOLDER" is a write, answered "ok" or "stale".
type resourceServer struct {
	resource leasetest.FencedResource
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
