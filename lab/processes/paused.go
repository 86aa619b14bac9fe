//go:build linux

package processes

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"coord/lab"
	"coord/lab/articles"
	"coord/lease"
)

var pausedLeaderExperiment = lab.Experiment{
	Name:     "paused-leader",
	Rung:     lab.Processes,
	Short:    "SIGSTOP the leader past its TTL, let another take over, SIGCONT",
	Shows:    "paused past its TTL",
	Articles: "a leader paused past its lease wakes and acts as leader; only fencing stops it",
	Figure:   "acts as leader",
	Help: `A leader that is paused (a GC pause, a swap storm, SIGSTOP) does not know that
time has passed. The lab stops the leader with SIGSTOP, waits until another
process has taken over, then continues it with SIGCONT:

  articles  the articles' lease program. Its renew rewrites the lock file
            without checking who holds it, so the woken leader overwrites its
            successor's lease, and both go on renewing as leaders.
  coord     a leader built on coord's Elector over the file backend that writes
            to a fenced resource (a server in the lab that remembers the
            highest fencing token it has accepted). Renew checks the token, so
            the woken leader learns it has lost and steps down; the write it
            had in flight when it was stopped carries the old token and the
            resource rejects it.

Quick mode uses a 3 s lease (articles: lease 3 s, renew 1 s, watch 1 s); full
mode the articles' 9/3/3 and a 9 s TTL. --trials repeats it, --procs sets the
processes per side.

Predict before running: after SIGCONT, what is the first thing each old leader
does, and what does the lock file say afterwards? How many leaders does each
group have a second later?`,
	Quick: lab.Params{Trials: 1, Procs: 2},
	Full:  lab.Params{Trials: 5, Procs: 3},
	Run:   runPausedLeader,
}

// pausedTrial is one stop-and-continue of each side's leader.
type pausedTrial struct {
	// ArticlesTakeover says another process was elected while the leader
	// was stopped; ArticlesOverwrote that the woken leader renewed after
	// its successor was elected; ArticlesFileIsOld that the lock file
	// named the woken leader right after that renew; ArticlesLeadersAfter
	// the most processes that believed at once that they led, over the
	// whole trial; ArticlesNote why the trial stopped short.
	ArticlesTakeover     bool   `json:"articles_takeover"`
	ArticlesOverwrote    bool   `json:"articles_overwrote"`
	ArticlesFileIsOld    bool   `json:"articles_file_is_old_leader"`
	ArticlesLeadersAfter int    `json:"articles_leaders_after"`
	ArticlesNote         string `json:"articles_note,omitempty"`

	// CoordTakeover says another was elected with a greater token;
	// CoordSteppedDown that the woken leader reported lost;
	// CoordRenewedAfter that it renewed after its successor's first
	// accepted write; CoordStaleAccepted and CoordStaleRejected count the
	// old leader's writes after its successor's first accepted write;
	// CoordCheck lists fencing violations the resource found.
	CoordTakeover      bool     `json:"coord_takeover"`
	CoordSteppedDown   bool     `json:"coord_stepped_down"`
	CoordRenewedAfter  bool     `json:"coord_renewed_after"`
	CoordStaleAccepted int      `json:"coord_stale_accepted"`
	CoordStaleRejected int      `json:"coord_stale_rejected"`
	CoordCheck         []string `json:"coord_check,omitempty"`
}

type pausedData struct {
	Procs  int           `json:"procs"`
	Trials []pausedTrial `json:"trials"`
}

func runPausedLeader(ctx context.Context, env *lab.Env) (*lab.Result, error) {
	d := pausedData{Procs: env.Procs}
	env.Progress.Start("paused-leader", env.Trials)
	for i := range env.Trials {
		var t pausedTrial
		err := bothSides(filepath.Join(env.Dir, "trial-"+strconv.Itoa(i)),
			func(dir string) error { return pausedArticles(ctx, env, dir, &t) },
			func(dir string) error { return pausedCoord(ctx, env, dir, &t) })
		if err != nil {
			return nil, err
		}
		d.Trials = append(d.Trials, t)
		env.Progress.Step()
	}
	return pausedResult(d), nil
}

func pausedArticles(ctx context.Context, env *lab.Env, dir string, t *pausedTrial) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	path := filepath.Join(dir, "leader.lock")
	leaseFor, renew, watch := articlesTimings(env.Quick)
	g := newGroup()
	defer g.stop()
	for p := range env.Procs {
		args := append([]string{"articles", "lease", path, "--json"}, timingArgs(env.Quick)...)
		if err := g.start("p"+strconv.Itoa(p+1), env.Command(ctx, args...)); err != nil {
			return err
		}
	}
	old, ok := g.waitEvent(ctx, 30*time.Second, isElected)
	if !ok {
		return fmt.Errorf("paused-leader: no articles leader within 30 s")
	}
	stoppedAt, err := g.signal(old.Member, syscall.SIGSTOP)
	if err != nil {
		return err
	}
	next, ok := g.waitEvent(ctx, leaseFor+2*watch+15*time.Second, func(e event) bool {
		return e.Event.Event == lease.EventElected && e.Member != old.Member && e.MonoNS > stoppedAt
	})
	if !ok {
		t.ArticlesNote = "nobody took over while the leader was stopped"
		_, err := g.signal(old.Member, syscall.SIGCONT)
		return err
	}
	t.ArticlesTakeover = true
	if _, err := g.signal(old.Member, syscall.SIGCONT); err != nil {
		return err
	}
	renewed, ok := g.waitEvent(ctx, 2*renew+5*time.Second, func(e event) bool {
		return e.Event.Event == lease.EventRenewed && e.Member == old.Member && e.MonoNS > next.MonoNS
	})
	if ok {
		t.ArticlesOverwrote = true
		// Right after the old leader's renew the file is its record,
		// until the new leader's next renew writes its own.
		if data, err := os.ReadFile(path); err == nil {
			var c articles.LeaseContent
			if json.Unmarshal(data, &c) == nil {
				t.ArticlesFileIsOld = strconv.Itoa(c.ProcessID) == renewed.Holder
			}
		}
	}
	sleep(ctx, renew+watch)
	g.stop() // drain every participant's pipe: the timeline is complete
	t.ArticlesLeadersAfter = maxLeaders(g.snapshot(), g.exitTimes())
	return ctx.Err()
}

func pausedCoord(ctx context.Context, env *lab.Env, dir string, t *pausedTrial) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	ttl, _, _ := articlesTimings(env.Quick)
	res, err := serveResource(filepath.Join(dir, "resource.sock"))
	if err != nil {
		return err
	}
	defer res.close()
	store := "file://" + filepath.Join(dir, "leader.lock")
	g := newGroup()
	defer g.stop()
	for p := range env.Procs {
		name := "p" + strconv.Itoa(p+1)
		cmd := env.ChildCommand(ctx, childFencedLeader, "--store", store, "--id", name, "--ttl", ttl.String(),
			"--socket", filepath.Join(dir, "resource.sock"), "--interval", "20ms")
		if err := g.start(name, cmd); err != nil {
			return err
		}
	}
	old, ok := g.waitEvent(ctx, 30*time.Second, func(e event) bool {
		return e.Event.Event == eventWrite && e.Detail == "accepted"
	})
	if !ok {
		return fmt.Errorf("paused-leader: no coord leader wrote within 30 s")
	}
	stoppedAt, err := g.signal(old.Member, syscall.SIGSTOP)
	if err != nil {
		return err
	}
	// Wait until the successor has written: from then on the resource
	// knows the new token.
	next, ok := g.waitEvent(ctx, ttl+15*time.Second, func(e event) bool {
		return e.Event.Event == eventWrite && e.Detail == "accepted" && e.Member != old.Member && e.MonoNS > stoppedAt
	})
	if !ok {
		_, err := g.signal(old.Member, syscall.SIGCONT)
		return err
	}
	t.CoordTakeover = next.Token > old.Token
	if _, err := g.signal(old.Member, syscall.SIGCONT); err != nil {
		return err
	}
	_, t.CoordSteppedDown = g.waitEvent(ctx, ttl+5*time.Second, func(e event) bool {
		return e.Event.Event == lease.EventLost && e.Member == old.Member && e.MonoNS > next.MonoNS
	})
	// Let anything else the old leader would do arrive.
	sleep(ctx, 500*time.Millisecond)
	for _, e := range g.snapshot() {
		if e.Member == old.Member && e.MonoNS > next.MonoNS && e.Event.Event == lease.EventRenewed {
			t.CoordRenewedAfter = true
		}
	}
	// The resource's own history orders the writes as it received them:
	// count the old token's writes after the new token's first.
	successor := false
	for _, w := range res.resource.Writes() {
		switch {
		case w.Token == next.Token && w.Accepted:
			successor = true
		case successor && w.Token < next.Token && w.Accepted:
			t.CoordStaleAccepted++
		case successor && w.Token < next.Token:
			t.CoordStaleRejected++
		}
	}
	for _, err := range res.resource.Check() {
		t.CoordCheck = append(t.CoordCheck, err.Error())
	}
	return ctx.Err()
}

func pausedResult(d pausedData) *lab.Result {
	res := &lab.Result{Data: d, Verdict: judgePaused(d)}
	overwrote, fileOld, coordDown, rejected, accepted := 0, 0, 0, 0, 0
	leadersAfter := 0
	for _, t := range d.Trials {
		if t.ArticlesOverwrote {
			overwrote++
		}
		if t.ArticlesFileIsOld {
			fileOld++
		}
		if t.CoordSteppedDown && !t.CoordRenewedAfter {
			coordDown++
		}
		rejected += t.CoordStaleRejected
		accepted += t.CoordStaleAccepted
		leadersAfter = max(leadersAfter, t.ArticlesLeadersAfter)
	}
	n := len(d.Trials)
	res.Original = fmt.Sprintf("woken leader overwrote the new lease in %d/%d trials; %d leaders at once", overwrote, n, leadersAfter)
	res.Coord = fmt.Sprintf("stepped down in %d/%d; stale writes rejected %d, accepted %d", coordDown, n, rejected, accepted)
	res.Row.Original = fmt.Sprintf("overwrote %d/%d", overwrote, n)
	res.Row.Coord = fmt.Sprintf("steps down %d/%d", coordDown, n)
	res.AddDetail("workload", "%d processes per side; the leader is stopped until another has taken over", d.Procs)
	for i, t := range d.Trials {
		res.AddDetail("trial "+strconv.Itoa(i+1)+", articles", "takeover %v, old leader renewed after it %v, lock file named the old leader %v, %d leaders at once afterwards %s",
			t.ArticlesTakeover, t.ArticlesOverwrote, t.ArticlesFileIsOld, t.ArticlesLeadersAfter, t.ArticlesNote)
		res.AddDetail("trial "+strconv.Itoa(i+1)+", coord", "takeover with a greater token %v, old leader reported lost %v, renewed after %v, stale writes rejected %d accepted %d, fencing violations %d",
			t.CoordTakeover, t.CoordSteppedDown, t.CoordRenewedAfter, t.CoordStaleRejected, t.CoordStaleAccepted, len(t.CoordCheck))
	}
	return res
}

// judgePaused: the articles' woken leader renews over its successor's lease
// in every trial; coord's steps down, never renews after the takeover, and
// none of its stale writes is accepted.
func judgePaused(d pausedData) lab.Verdict {
	overwrote, coordOK := 0, len(d.Trials) > 0
	var problem string
	for _, t := range d.Trials {
		if t.ArticlesOverwrote {
			overwrote++
		}
		switch {
		case !t.CoordTakeover:
			coordOK, problem = false, "no coord successor with a greater token"
		case !t.CoordSteppedDown || t.CoordRenewedAfter:
			coordOK, problem = false, "coord's old leader did not step down"
		case t.CoordStaleAccepted > 0 || len(t.CoordCheck) > 0:
			coordOK, problem = false, "a stale write was accepted"
		}
	}
	reason := fmt.Sprintf("the articles' woken leader overwrote its successor's lease in %d of %d trials", overwrote, len(d.Trials))
	if coordOK {
		reason += "; coord's stepped down every time and no stale write got through"
	} else {
		reason += "; " + problem
	}
	return lab.Judge(len(d.Trials) > 0 && overwrote == len(d.Trials), coordOK, reason)
}
