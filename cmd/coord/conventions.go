package main

// The conventions every command follows (docs/cli.md): JSON output, the
// COORD_* environment variables, and bounds on durations.

import (
	"encoding/json"
	"io"
	"time"

	"github.com/spf13/cobra"
)

// envStore names the lease store when --store is not given, as
// ETCDCTL_ENDPOINTS does for etcdctl. The cluster variables (COORD_ENDPOINTS,
// COORD_CACERT, COORD_CERT, COORD_KEY, COORD_TOKEN) are lease/raftlease's.
const envStore = "COORD_STORE"

// writeJSON writes v as one JSON object (indented, ending in a newline): the
// --json output of every command that reports once. Streams write JSON
// Lines instead (eventlog.Writer).
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// addJSONFlag registers --json with the help text every command shares.
func addJSONFlag(cmd *cobra.Command, p *bool, what string) {
	cmd.Flags().BoolVar(p, "json", false, what)
}

// storeFromEnv returns --store, else $COORD_STORE: flags win over the
// environment.
func storeFromEnv(cmd *cobra.Command, store string, getenv func(string) string) string {
	if cmd.Flags().Changed("store") || store != "" {
		return store
	}
	return getenv(envStore)
}

// durationBounds are a duration flag's documented floor and ceiling.
type durationBounds struct {
	flag     string
	min, max time.Duration
	why      string // why the floor exists, said in the error
}

// Bounds on the duration flags, listed in docs/cli.md.
var (
	// ttlBounds: below a second, renewals (every 2/9 of the TTL) flood the
	// store and the log, and a store's round trip or a scheduling delay
	// eats a large part of the lease; above an hour, a holder that dies
	// without a word blocks everyone for that long.
	ttlBounds = durationBounds{flag: "--ttl", min: time.Second, max: time.Hour,
		why: "renewals come every 2/9 of the TTL"}
	// leaseTimingMin is the floor of --renew-deadline, --renew-interval
	// and --retry-period: each is an interval between requests to the
	// store.
	leaseTimingMin = 50 * time.Millisecond
	// connectTimeoutMax bounds --connect-timeout (0, waiting forever, is
	// allowed and documented).
	connectTimeoutMax = 24 * time.Hour
)

// check returns a usage error naming the flag and the value the user typed
// when d is outside the bounds.
func (b durationBounds) check(d time.Duration) error {
	switch {
	case d < b.min && b.why != "":
		return usagef("%s %v: below the minimum %v (%s; see docs/cli.md)", b.flag, d, b.min, b.why)
	case d < b.min:
		return usagef("%s %v: below the minimum %v (see docs/cli.md)", b.flag, d, b.min)
	case b.max > 0 && d > b.max:
		return usagef("%s %v: above the maximum %v (see docs/cli.md)", b.flag, d, b.max)
	}
	return nil
}

// nonNegative is the bound of a duration flag where 0 means "none" or
// "forever", up to max.
func nonNegative(flag string, max time.Duration) durationBounds {
	return durationBounds{flag: flag, min: 0, max: max}
}

// positive is the bound of a duration flag that must be at least min.
func positive(flag string, min, max time.Duration) durationBounds {
	return durationBounds{flag: flag, min: min, max: max}
}
