package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"coord/lease"

	"github.com/spf13/cobra"
)

func newWatchCmd() *cobra.Command {
	var (
		store, name string
		jsonOut     bool
	)
	cmd := &cobra.Command{
		Use:   "watch --store URL [--name NAME]",
		Short: "Print a lease's holder, token and expiry as they change, without campaigning",
		Long: `Watch a lease as a passive observer: print its holder, fencing token and
expiry now, and again at every change (acquired, renewed, freed), until
SIGINT or SIGTERM. It never acquires, renews or releases: it only reads,
through the store's watch (etcd watches, Redis pub/sub, PostgreSQL LISTEN,
ZooKeeper watches, inotify for file://; stores that cannot push poll, as
their docs say). A watch that fails is logged and made again. On etcd,
ZooKeeper and a coord cluster a renewal changes nothing a watch can see (a
keep-alive of the key's etcd lease, a read on the holder's session, a
renewal the cluster's leader answers without a Raft write): there the
watcher prints acquisitions and frees only. A ZooKeeper lease lasts as long as its
holder's session, which only the server sees: no expiry is printed.

Changes may coalesce: a holder that came and went between two reads of a
polling store is not seen, only the state after it. Expiry is on this
machine's clock, from when the store answered.

With --json, each line is {"time", "name", "change", "holder", "token",
"expiry"}, change being current, acquired, renewed or freed.`,
		Example: `  coord watch --store file:///tmp/leader.lock
  coord watch --store redis://127.0.0.1:6379/0 --name demo --json
  coord watch --store raft:// --name demo     # a coord cluster: endpoints, CA and token from coord cluster env`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if store == "" {
				return usagef("--store is required (e.g. --store file:///tmp/leader.lock)")
			}
			b, err := lease.Open(cmd.Context(), store)
			if err != nil {
				if errors.Is(err, lease.ErrInvalid) {
					return &usageError{err: fmt.Errorf("--store: %w", err)}
				}
				return err
			}
			defer b.Close()
			if name == "" {
				name = lease.DefaultName(b, "coord")
			}
			p := watchPrinter{w: cmd.OutOrStdout(), name: name, json: jsonOut, start: time.Now()}
			return lease.Observe(cmd.Context(), b, name, p.print, func(err error) {
				slog.Warn("watch failed; watching again", "store", store, "lease", name, "err", err)
			})
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&store, "store", "", "lease store URL, e.g. file:///tmp/leader.lock (required)")
	fl.StringVar(&name, "name", "", "lease name (default: the lock file's name for file://, else \"coord\")")
	fl.BoolVar(&jsonOut, "json", false, "print one JSON object per line")
	return cmd
}

// watchPrinter prints the changes coord watch sees.
type watchPrinter struct {
	w     io.Writer
	name  string
	json  bool
	start time.Time
}

// watchLine is the JSON of one change.
type watchLine struct {
	Time   time.Time  `json:"time"`
	Name   string     `json:"name"`
	Change string     `json:"change"`
	Holder string     `json:"holder"`
	Token  uint64     `json:"token"`
	Expiry *time.Time `json:"expiry,omitempty"`
}

func (p watchPrinter) print(c lease.Change) {
	now := time.Now()
	r := c.Record
	if p.json {
		line := watchLine{Time: now, Name: p.name, Change: string(c.Kind), Holder: r.Holder, Token: r.Token}
		if !r.Expiry.IsZero() {
			line.Expiry = &r.Expiry
		}
		b, _ := json.Marshal(line)
		fmt.Fprintf(p.w, "%s\n", b)
		return
	}
	var what string
	switch {
	case r.Free() && c.Kind == lease.ChangeFreed:
		what = fmt.Sprintf("freed by %s (last token %d)", c.Previous.Holder, r.Token)
	case r.Free():
		what = fmt.Sprintf("free (last token %d)", r.Token)
	case c.Kind == lease.ChangeCurrent:
		what = fmt.Sprintf("held by %s, token %d", r.Holder, r.Token)
	default:
		what = fmt.Sprintf("%s by %s, token %d", c.Kind, r.Holder, r.Token)
	}
	if !r.Free() && !r.Expiry.IsZero() {
		what += fmt.Sprintf(", expires %s (in %.1fs)", r.Expiry.Format("15:04:05.000"), r.Expiry.Sub(now).Seconds())
	}
	fmt.Fprintf(p.w, "%7.3fs %s: %s\n", now.Sub(p.start).Seconds(), p.name, what)
}
