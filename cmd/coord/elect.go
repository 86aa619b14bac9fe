package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"coord/lease"
	"coord/lease/eventlog"

	"github.com/spf13/cobra"
)

// leaseFlags are the flags `coord elect` and `coord run` share.
type leaseFlags struct {
	store         string
	name          string
	id            string
	ttl           time.Duration
	renewDeadline time.Duration
	renewInterval time.Duration
	retryPeriod   time.Duration
	// connectTimeout bounds the wait for an unreachable store at the
	// start (0: forever).
	connectTimeout time.Duration
	// metricsAddr is where Prometheus metrics are served ("" for none).
	metricsAddr string
}

// connectTimeoutDefault is how long elect and run wait for a store that
// does not answer at the start before they give up.
const connectTimeoutDefault = 15 * time.Second

func (f *leaseFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.store, "store", "", "lease store URL, e.g. file:///tmp/leader.lock (default $"+envStore+"; one of them is required)")
	fl.StringVar(&f.name, "name", "", "lease name (default: the URL's #fragment, or the lock file's name for file://; required for other stores)")
	fl.StringVar(&f.id, "id", "", "this participant's identity (default HOSTNAME-PID)")
	fl.DurationVar(&f.ttl, "ttl", 9*time.Second, fmt.Sprintf("lease time to live (%v to %v)", ttlBounds.min, ttlBounds.max))
	fl.DurationVar(&f.renewDeadline, "renew-deadline", 0, "step down if not renewed within this (default scales with --ttl)")
	fl.DurationVar(&f.renewInterval, "renew-interval", 0, "time between renewals (default scales with --ttl)")
	fl.DurationVar(&f.retryPeriod, "retry-period", 0, "time between retries (default scales with --ttl)")
	fl.DurationVar(&f.connectTimeout, "connect-timeout", connectTimeoutDefault, "give up (exit 1) if the store does not answer within this at the start; 0 waits forever")
	fl.StringVar(&f.metricsAddr, "metrics-addr", "", "serve Prometheus metrics at http://ADDR/metrics, ADDR on loopback, e.g. 127.0.0.1:9100 (default: none; port 0 picks a free one, logged)")
}

// resolve fills --store from $COORD_STORE when the flag is absent, and
// checks the durations against their documented bounds.
func (f *leaseFlags) resolve(cmd *cobra.Command, getenv func(string) string) error {
	f.store = storeFromEnv(cmd, f.store, getenv)
	if err := ttlBounds.check(f.ttl); err != nil {
		return err
	}
	for _, o := range []struct {
		flag string
		v    time.Duration
	}{{"--renew-deadline", f.renewDeadline}, {"--renew-interval", f.renewInterval}, {"--retry-period", f.retryPeriod}} {
		if cmd.Flags().Changed(o.flag[2:]) {
			if err := positive(o.flag, leaseTimingMin, ttlBounds.max).check(o.v); err != nil {
				return err
			}
		}
	}
	if err := checkMetricsAddr(f.metricsAddr); err != nil {
		return err
	}
	return nonNegative("--connect-timeout", connectTimeoutMax).check(f.connectTimeout)
}

// config returns the Elector config the flags describe, validated; scaled
// holds the defaults for the flags left unset. Invalid values are usage
// errors, reported before the store is touched.
func (f *leaseFlags) config(scaled lease.Config) (lease.Config, error) {
	if f.store == "" {
		return lease.Config{}, usagef("--store is required, or $%s (e.g. --store file:///tmp/leader.lock)", envStore)
	}
	cfg := scaled
	for _, o := range []struct {
		flag string
		v    time.Duration
		dst  *time.Duration
	}{
		{"renew-deadline", f.renewDeadline, &cfg.RenewDeadline},
		{"renew-interval", f.renewInterval, &cfg.RenewInterval},
		{"retry-period", f.retryPeriod, &cfg.RetryPeriod},
	} {
		if o.v != 0 {
			*o.dst = o.v
		}
	}
	cfg.TTL = f.ttl
	cfg.Name, cfg.Holder = "placeholder", f.identity()
	if err := cfg.Validate(); err != nil {
		// Name the flags, not the Config fields.
		msg := strings.TrimPrefix(err.Error(), lease.ErrInvalid.Error()+": config: ")
		msg = strings.NewReplacer("RenewDeadline", "--renew-deadline", "RenewInterval", "--renew-interval",
			"RetryPeriod", "--retry-period", "TTL", "--ttl", "Holder", "--id").Replace(msg)
		return lease.Config{}, usagef("invalid timings: %s", msg)
	}
	cfg.Name = f.name
	return cfg, nil
}

func (f *leaseFlags) identity() string {
	if f.id != "" {
		return f.id
	}
	host, err := os.Hostname()
	if err != nil {
		host = "coord"
	}
	return fmt.Sprintf("%s-%d", host, os.Getpid())
}

// openStore opens the store; a bad URL or directory is a usage error. The
// lease name is --name, else the URL's fragment (redis://host/0#NAME), else
// the store's own default (file:// names the lock file). Other stores have
// no default: one shared by every job would make unrelated jobs wait for
// each other.
func (f *leaseFlags) openStore(ctx context.Context, cfg *lease.Config) (lease.Backend, error) {
	store := f.store
	if u, err := url.Parse(store); err == nil && u.Fragment != "" {
		if cfg.Name == "" {
			cfg.Name = u.Fragment
		}
		u.Fragment, u.RawFragment = "", ""
		store = u.String()
	} else if err == nil && cfg.Name == "" && u.Scheme != "file" && slices.Contains(lease.Schemes(), u.Scheme) {
		return nil, usagef("--name is required for %s:// stores (or name the lease in the URL: %s#NAME)", u.Scheme, u.Redacted())
	}
	open := func(ctx context.Context) (lease.Backend, error) { return lease.Open(ctx, store) }
	probe := func(ctx context.Context, b lease.Backend) error {
		name := cfg.Name
		if name == "" {
			name = lease.DefaultName(b, "")
		}
		if name == "" {
			return nil // reported below
		}
		_, err := b.Get(ctx, name)
		return err
	}
	b, err := lease.Connect(ctx, open, probe, lease.ConnectConfig{Timeout: f.connectTimeout,
		OnRetry: func(attempt int, err error, wait time.Duration) {
			slog.Warn("store unreachable; retrying", "store", redactURL(store), "attempt", attempt, "retry_in", wait.Round(time.Millisecond),
				"gives_up_in", giveUpIn(f.connectTimeout), "err", err)
		}})
	var unreachable *lease.UnreachableError
	switch {
	case errors.As(err, &unreachable):
		return nil, fmt.Errorf("--store %s: no answer within --connect-timeout %v (%s; --connect-timeout 0 waits forever): %w",
			redactURL(store), f.connectTimeout, unreachable.AttemptsString(), unreachable.Last)
	case errors.Is(err, lease.ErrInvalid):
		return nil, &usageError{err: fmt.Errorf("--store: %w", err)}
	case err != nil:
		return nil, fmt.Errorf("--store %s: %w", redactURL(store), err)
	}
	if cfg.Name == "" {
		cfg.Name = lease.DefaultName(b, "")
	}
	if cfg.Name == "" {
		b.Close()
		return nil, usagef("--name is required for this store")
	}
	return b, nil
}

// redactURL returns a store URL with its password hidden, for messages.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}

// giveUpIn says when Connect gives up, for the retry log line.
func giveUpIn(timeout time.Duration) string {
	if timeout == 0 {
		return "never (--connect-timeout 0)"
	}
	return "--connect-timeout " + timeout.String()
}

func newElectCmd() *cobra.Command {
	var (
		f       leaseFlags
		jsonOut bool
	)
	cmd := &cobra.Command{
		Use:   "elect --store URL",
		Short: "Take part in a leader election over a lease store",
		Long: `Take part in a leader election: campaign for the lease, hold it while
alive, and print every change of role until SIGTERM or SIGINT, which hand
the lease back at once.

Readable lines show seconds since start, this participant's role, the
holder and its fencing token. With --json, each line on stdout is one JSON
object: {"time", "mono_ns", "event", "holder", "token", "id", "pid",
"expiry", "error"}, where event is elected, renewed, lost, released or
leader (another participant holds the lease). A leader that resigns prints
released before it hands the lease back, so that in a timeline merged by
mono_ns from several participants its successor's elected comes after it.

Timings: --ttl alone scales the others (renew deadline 2/3, renew interval
2/9, retry period 1/9 of the TTL); they must satisfy
ttl > renew-deadline > renew-interval > 0.

A store in a state that waiting will not mend (a lock file this user may
not replace, an immutable one) ends the command after three attempts: a
leader first prints lost with the reason; the last line on stderr names the
file and the reason, and the exit status is 1.

With --metrics-addr ADDR (on loopback only: the page has no TLS or
authentication), Prometheus metrics are served at http://ADDR/metrics
while the command runs: coord_elector_is_leader,
_elected_total, _lost_total{reason}, _released_total,
_leader_changes_total, _token, _observed_token,
_lease_expiry_timestamp_seconds, _last_renew_timestamp_seconds,
_seconds_since_last_renew, the _renew_seconds and _acquire_seconds
histograms, and _info (docs/leases.md). Bind it to loopback unless the
network may read them.`,
		Example: `  coord elect --store file:///tmp/leader.lock
  coord elect --store file:///tmp/leader.lock --id a --ttl 3s --json
  coord elect --store file:///tmp/leader.lock --metrics-addr 127.0.0.1:9100  # then: curl 127.0.0.1:9100/metrics
  coord elect --store raft:// --name demo    # a coord cluster: endpoints, CA and token from coord cluster env
  coord elect --store 'raft://127.0.0.1:8001,127.0.0.1:8002?cacert=ca.crt&token_file=app.token'
  coord elect --store 'raft://?session=true' --name demo  # the cluster frees the lease ~2s after this process dies`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := f.resolve(cmd, os.Getenv); err != nil {
				return err
			}
			cfg, err := f.config(lease.ScaledConfig(f.ttl))
			if err != nil {
				return err
			}
			b, err := f.openStore(cmd.Context(), &cfg)
			if err != nil {
				return err
			}
			defer b.Close()
			ms, err := startMetrics(f.metricsAddr, f.store, cfg)
			if err != nil {
				return err
			}
			defer ms.stop()
			out := newElectPrinter(cmd.OutOrStdout(), cfg.Holder, jsonOut)
			cfg.Callbacks = ms.callbacks(out.callbacks(cfg.Holder))
			e, err := lease.NewElector(ms.backend(b), cfg)
			if err != nil {
				return &usageError{err: err}
			}
			return e.Run(cmd.Context())
		},
	}
	f.register(cmd)
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print one JSON event per line")
	return cmd
}

// electPrinter prints an Elector's events, readable or as JSON lines.
type electPrinter struct {
	mu    sync.Mutex
	w     io.Writer
	id    string
	start time.Time
	json  *eventlog.Writer
}

func newElectPrinter(w io.Writer, id string, jsonOut bool) *electPrinter {
	p := &electPrinter{w: w, id: id, start: time.Now()}
	if jsonOut {
		p.json = eventlog.NewWriter(w, id)
	}
	return p
}

// callbacks returns Elector callbacks that print events. self is this
// participant's holder name.
func (p *electPrinter) callbacks(self string) lease.Callbacks {
	return lease.Callbacks{
		OnElected: func(_ context.Context, token uint64) {
			p.print(lease.Event{Event: lease.EventElected, Holder: self, Token: token}, "LEADER", "elected")
		},
		OnRenewed: func(r lease.Record) {
			p.print(lease.Event{Event: lease.EventRenewed, Holder: self, Token: r.Token, Expiry: r.Expiry}, "LEADER", "renewed")
		},
		OnLost: func(token uint64, err error) {
			if err == nil {
				p.print(lease.Event{Event: lease.EventReleased, Holder: self, Token: token}, "WATCHER", "released the lease")
				return
			}
			p.print(lease.Event{Event: lease.EventLost, Holder: self, Token: token, Error: err.Error()}, "WATCHER", "lost the lease: "+err.Error())
		},
		OnLeaderChanged: func(r lease.Record) {
			if r.Holder == "" || r.Holder == self {
				return
			}
			p.print(lease.Event{Event: lease.EventLeader, Holder: r.Holder, Token: r.Token, Expiry: r.Expiry}, "WATCHER", "lease held by "+r.Holder)
		},
	}
}

func (p *electPrinter) print(ev lease.Event, role, what string) {
	if p.json != nil {
		p.json.Write(ev)
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	line := fmt.Sprintf("%7.3fs [%s] [%s] %s, token %d", time.Since(p.start).Seconds(), p.id, role, what, ev.Token)
	if !ev.Expiry.IsZero() {
		line += ", valid until " + ev.Expiry.Format("15:04:05.000")
	}
	fmt.Fprintln(p.w, line)
}
