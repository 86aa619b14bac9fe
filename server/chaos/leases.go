package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"coord/client"
)

// LeaseConfig configures a lease run (RunLeases): Config's cluster,
// nemesis and clients (Clients holders contending for Keys lease names),
// and the leases' TTL.
type LeaseConfig struct {
	Config
	// TTL is the leases' time to live; holders renew every TTL/4.
	TTL time.Duration
}

// Tenure is one holder's belief that it held a lease: from when it learnt
// it acquired it until the expiry it last computed (from the send time of
// its last successful acquire or renewal, plus the TTL), or until it sent
// a release.
type Tenure struct {
	Name, Holder string
	Token        uint64
	From, Until  time.Time
}

// LeaseReport is what a lease run observed.
type LeaseReport struct {
	// Tenures are every holder's beliefs; Renewals counts the renewals
	// answered OK, Faults the nemesis's actions.
	Tenures  []Tenure
	Renewals int
	Faults   []string
	// Overlaps lists pairs of tenures of one lease under different tokens
	// whose times overlap: two holders that both believed they held it.
	Overlaps []string
}

// RunLeases runs holders that acquire, renew and release leases on a real
// cluster under the nemesis (kills, pauses, partitions, isolated leaders),
// and checks that no two holders ever believed they held one lease at the
// same time. A holder believes in its lease from the send time of its last
// acquire or renewal plus the TTL, as every coord client does, so the check
// holds the leaders to the promise of the package doc of server ("Lease
// expiry"), renewals answered without a Raft write included. All
// processes share this machine's clock.
func RunLeases(ctx context.Context, cfg LeaseConfig) (*LeaseReport, error) {
	if cfg.TTL <= 0 || !cfg.valid() {
		return nil, fmt.Errorf("%w: %+v", ErrInvalid, cfg)
	}
	logf := cfg.logf()
	c, err := cfg.start(ctx)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	rep := &LeaseReport{}
	var mu sync.Mutex
	runCtx, stop := context.WithTimeout(ctx, cfg.Duration)
	defer stop()
	var wg sync.WaitGroup
	for i := range cfg.Clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tenures, renewals := runHolder(runCtx, c.ClientConfig(), i, cfg)
			mu.Lock()
			rep.Tenures = append(rep.Tenures, tenures...)
			rep.Renewals += renewals
			mu.Unlock()
		}()
	}
	rep.Faults = nemesis(runCtx, c, cfg.Config, logf)
	wg.Wait()
	rep.Overlaps = Overlaps(rep.Tenures)
	return rep, nil
}

// runHolder acquires a random lease, keeps it for a while with renewals,
// releases it or lets it go, and starts again, until ctx ends.
func runHolder(ctx context.Context, ccfg client.Config, id int, cfg LeaseConfig) (tenures []Tenure, renewals int) {
	rng := rand.New(rand.NewPCG(cfg.Seed, uint64(id)+1000))
	ccfg.AttemptTimeout = cfg.TTL / 2
	ccfg.BackoffMax = cfg.TTL / 4
	cl, err := client.New(ccfg)
	if err != nil {
		return nil, 0
	}
	holder := fmt.Sprintf("holder-%d", id)
	wait := func(d time.Duration) bool {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(d):
			return true
		}
	}
	for ctx.Err() == nil {
		name := fmt.Sprintf("lease-%d", rng.IntN(cfg.Keys))
		actx, cancel := context.WithTimeout(ctx, cfg.TTL)
		sent := time.Now()
		l, err := cl.Acquire(actx, name, holder, cfg.TTL)
		cancel()
		if err != nil {
			wait(cfg.TTL / 4)
			continue
		}
		t := Tenure{Name: name, Holder: holder, Token: l.Token, From: time.Now(), Until: sent.Add(cfg.TTL)}
		keep := time.Duration(rng.IntN(4)) * cfg.TTL
		for start := time.Now(); time.Since(start) < keep && time.Now().Before(t.Until); {
			if !wait(cfg.TTL / 4) {
				break
			}
			rctx, cancel := context.WithTimeout(ctx, cfg.TTL/2)
			sent := time.Now()
			_, err := cl.Renew(rctx, name, holder, t.Token, 0)
			cancel()
			if err == nil {
				t.Until = sent.Add(cfg.TTL)
				renewals++
			}
		}
		if rng.IntN(2) == 0 && time.Now().Before(t.Until) {
			t.Until = time.Now() // it stops acting before it sends the release
			rctx, cancel := context.WithTimeout(context.Background(), cfg.TTL)
			_ = cl.Release(rctx, name, holder, t.Token)
			cancel()
		} else {
			wait(time.Until(t.Until)) // let it expire
		}
		tenures = append(tenures, t)
	}
	return tenures, renewals
}

// Overlaps returns the pairs of tenures of one lease, under different
// tokens, whose times overlap.
func Overlaps(tenures []Tenure) []string {
	s := slices.Clone(tenures)
	slices.SortFunc(s, func(a, b Tenure) int {
		if a.Name != b.Name {
			return cmpString(a.Name, b.Name)
		}
		return a.From.Compare(b.From)
	})
	var out []string
	for i := range s {
		for j := i + 1; j < len(s) && s[j].Name == s[i].Name && s[j].From.Before(s[i].Until); j++ {
			if s[j].Token != s[i].Token {
				out = append(out, fmt.Sprintf("%s: %s held token %d until %s, %s held token %d from %s (%v overlap)",
					s[i].Name, s[i].Holder, s[i].Token, s[i].Until.Format(time.StampMicro), s[j].Holder, s[j].Token,
					s[j].From.Format(time.StampMicro), s[i].Until.Sub(s[j].From)))
			}
		}
	}
	return out
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
