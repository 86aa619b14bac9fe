//go:build linux

package processes

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"coord/internal/leasekit/leasekittest"
	"coord/lab"
	"coord/lease"
)

// coordBin is the coord binary the experiments re-execute, built once.
var coordBin string

func TestMain(m *testing.M) {
	lab.ServeChild()
	os.Exit(leasekittest.MainWithCoord(m, &coordBin))
}

// runSmall runs an experiment at a small size with real coord processes.
// The runs are parallel: they spend their time waiting on processes and
// timers, not on the cores.
func runSmall(t *testing.T, name string, trials, procs int) *lab.Result {
	t.Helper()
	t.Parallel()
	e, err := lab.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	r := lab.Run(context.Background(), e, lab.Config{Quick: true, Trials: trials, Procs: procs, Seed: 1, Binary: coordBin})
	if r.Verdict.Outcome.Bad() {
		t.Fatalf("%s: %s: %s", name, r.Verdict.Outcome, r.Verdict.Reason)
	}
	if r.Original == "" || r.Coord == "" {
		t.Fatalf("%s: incomplete summary row %+v", name, r)
	}
	if err := r.Row.Validate(); err != nil {
		t.Errorf("%s: %v", name, err)
	}
	t.Logf("%s: original %q; coord %q; %s: %s", name, r.Original, r.Coord, r.Verdict.Outcome, r.Verdict.Reason)
	return r
}

func wantOutcome(t *testing.T, what string, v lab.Verdict, want lab.Outcome) {
	t.Helper()
	if v.Outcome != want {
		t.Errorf("%s: outcome %s (%s), want %s", what, v.Outcome, v.Reason, want)
	}
}

func trialsWith(leaders ...int) []contendTrial {
	out := make([]contendTrial, len(leaders))
	for i, n := range leaders {
		out[i] = contendTrial{Leaders: n, Decided: 4}
	}
	return out
}

func exclusiveWith(stat, excl, coord []contendTrial) exclusiveData {
	return exclusiveData{Procs: 4, Trials: map[string]map[string][]contendTrial{
		methodStatCreate: {startSequential: stat, startTogether: stat},
		methodExclusive:  {startSequential: excl, startTogether: excl},
		methodCoord:      {startSequential: coord, startTogether: coord},
	}}
}

func TestExclusiveVerdict(t *testing.T) {
	one := trialsWith(1, 1, 1)
	wantOutcome(t, "stat-then-create doubles, the others hold", judgeExclusive(exclusiveWith(trialsWith(1, 2, 1), one, one)), lab.Reproduced)
	wantOutcome(t, "stat-then-create never doubles", judgeExclusive(exclusiveWith(one, one, one)), lab.Differs)
	wantOutcome(t, "O_EXCL doubles", judgeExclusive(exclusiveWith(trialsWith(2), trialsWith(2), one)), lab.Differs)
	wantOutcome(t, "coord doubles", judgeExclusive(exclusiveWith(trialsWith(2), one, trialsWith(1, 2))), lab.Failed)
	wantOutcome(t, "coord elects nobody", judgeExclusive(exclusiveWith(trialsWith(2), one, trialsWith(0))), lab.Failed)
}

func TestExclusiveSmall(t *testing.T) {
	r := runSmall(t, "exclusive-create", 1, 4)
	d := r.Data.(exclusiveData)
	for mode, ts := range d.Trials[methodCoord] {
		for _, tr := range ts {
			if tr.Leaders != 1 || tr.Decided != 4 {
				t.Errorf("coord, %s: %+v, want one leader among 4 decided", mode, tr)
			}
		}
	}
	for mode, ts := range d.Trials[methodExclusive] {
		for _, tr := range ts {
			if tr.Leaders != 1 {
				t.Errorf("O_EXCL, %s: %d leaders", mode, tr.Leaders)
			}
		}
	}
}

func failoverTrials(impl string, kill, term float64) []failoverTrial {
	return []failoverTrial{
		{Impl: impl, Signal: "kill -9", GapSeconds: kill, FailedOver: true, MaxLeaders: 1},
		{Impl: impl, Signal: "SIGTERM", GapSeconds: term, FailedOver: true, MaxLeaders: 1},
	}
}

func TestFailoverVerdict(t *testing.T) {
	articlesLike := failoverTrials(implArticles, 9.53, 0.31)
	coordLike := failoverTrials(implCoord, 0.01, 0.01)
	wantOutcome(t, "articles slow, coord fast", judgeFailover(failoverData{Trials: append(articlesLike, coordLike...)}), lab.Reproduced)
	wantOutcome(t, "articles fast after kill -9", judgeFailover(failoverData{Trials: append(failoverTrials(implArticles, 0.5, 0.3), coordLike...)}), lab.Differs)
	broken := failoverTrials(implCoord, 0.01, 0.01)
	broken[0].MaxLeaders = 2
	wantOutcome(t, "coord with two leaders", judgeFailover(failoverData{Trials: append(articlesLike, broken...)}), lab.Failed)
	stuck := failoverTrials(implCoord, 0, 0.01)
	stuck[0].FailedOver = false
	wantOutcome(t, "coord never failed over", judgeFailover(failoverData{Trials: append(articlesLike, stuck...)}), lab.Failed)
	slow := failoverTrials(implCoord, 12, 0.01)
	wantOutcome(t, "coord slower than its TTL", judgeFailover(failoverData{Trials: append(articlesLike, slow...)}), lab.Failed)
}

func TestFailoverSmall(t *testing.T) {
	r := runSmall(t, "failover", 1, 2)
	for _, tr := range r.Data.(failoverData).Trials {
		if tr.Impl == implCoord && (!tr.FailedOver || tr.MaxLeaders > 1) {
			t.Errorf("coord trial %+v", tr)
		}
	}
}

func TestEmptyFileVerdict(t *testing.T) {
	wedged := emptyTrial{ArticlesUnreadable: 6, CoordElected: true, CoordRepairs: []string{"empty"}}
	wantOutcome(t, "articles wedged, coord repairs", judgeEmptyFile(emptyData{Trials: []emptyTrial{wedged}}), lab.Reproduced)
	elected := wedged
	elected.ArticlesElected = 1
	wantOutcome(t, "articles elected anyway", judgeEmptyFile(emptyData{Trials: []emptyTrial{elected}}), lab.Differs)
	stuck := wedged
	stuck.CoordElected = false
	wantOutcome(t, "coord wedged too", judgeEmptyFile(emptyData{Trials: []emptyTrial{stuck}}), lab.Failed)
	silent := wedged
	silent.CoordRepairs = nil
	wantOutcome(t, "coord elected without saying what it repaired", judgeEmptyFile(emptyData{Trials: []emptyTrial{silent}}), lab.Failed)
}

func TestEmptyFileSmall(t *testing.T) {
	r := runSmall(t, "empty-file", 1, 2)
	tr := r.Data.(emptyData).Trials[0]
	if !tr.CoordElected || len(tr.CoordRepairs) == 0 {
		t.Errorf("coord on an empty lock file: %+v", tr)
	}
}

func TestRepairs(t *testing.T) {
	stderr := `time=2026-01-01T00:00:00Z level=WARN msg="lease/file: repairing lock file" lease=leader.lock problem="lock file unreadable: empty" token=0
time=2026-01-01T00:00:00Z level=INFO msg=other
level=WARN msg="lease/file: repairing lock file" problem=truncated`
	got := repairs(stderr)
	if len(got) != 2 || got[0] != "lock file unreadable: empty" || got[1] != "truncated" {
		t.Errorf("repairs = %q", got)
	}
}

func TestTakeoverVerdict(t *testing.T) {
	safe := takeoverTrial{ArticlesLeaders: 1, CoordLeaders: 1, CoordTokenGrew: true}
	wantOutcome(t, "one winner each, as the articles claim", judgeTakeover(takeoverData{Trials: []takeoverTrial{safe}}), lab.Reproduced)
	double := safe
	double.ArticlesLeaders = 2
	v := judgeTakeover(takeoverData{Trials: []takeoverTrial{safe, double}})
	wantOutcome(t, "the articles' takeover elects two", v, lab.Differs)
	if !strings.Contains(v.Reason, "safe") {
		t.Errorf("reason %q does not set the finding against the articles' claim", v.Reason)
	}
	coordDouble := safe
	coordDouble.CoordLeaders = 2
	wantOutcome(t, "coord elects two", judgeTakeover(takeoverData{Trials: []takeoverTrial{coordDouble}}), lab.Failed)
	noGrowth := safe
	noGrowth.CoordTokenGrew = false
	wantOutcome(t, "coord's token did not grow", judgeTakeover(takeoverData{Trials: []takeoverTrial{noGrowth}}), lab.Failed)
}

func TestTakeoverSmall(t *testing.T) {
	r := runSmall(t, "takeover-race", 1, 4)
	tr := r.Data.(takeoverData).Trials[0]
	if tr.CoordLeaders != 1 || !tr.CoordTokenGrew {
		t.Errorf("coord takeover: %+v", tr)
	}
	if tr.ArticlesLeaders < 1 {
		t.Errorf("the articles' watchers never took over an expired lease: %+v", tr)
	}
}

func TestPausedVerdict(t *testing.T) {
	good := pausedTrial{ArticlesTakeover: true, ArticlesOverwrote: true, CoordTakeover: true, CoordSteppedDown: true, CoordStaleRejected: 1}
	wantOutcome(t, "articles overwrite, coord steps down", judgePaused(pausedData{Trials: []pausedTrial{good}}), lab.Reproduced)
	polite := good
	polite.ArticlesOverwrote = false
	wantOutcome(t, "articles did not overwrite", judgePaused(pausedData{Trials: []pausedTrial{polite}}), lab.Differs)
	renewed := good
	renewed.CoordRenewedAfter = true
	wantOutcome(t, "coord renewed after the takeover", judgePaused(pausedData{Trials: []pausedTrial{renewed}}), lab.Failed)
	leaked := good
	leaked.CoordStaleAccepted = 1
	wantOutcome(t, "a stale write got through", judgePaused(pausedData{Trials: []pausedTrial{leaked}}), lab.Failed)
}

func TestPausedSmall(t *testing.T) {
	r := runSmall(t, "paused-leader", 1, 2)
	tr := r.Data.(pausedData).Trials[0]
	if !tr.CoordTakeover || !tr.CoordSteppedDown || tr.CoordRenewedAfter || tr.CoordStaleAccepted != 0 || len(tr.CoordCheck) != 0 {
		t.Errorf("coord's paused leader: %+v", tr)
	}
}

func TestMaxLeaders(t *testing.T) {
	ev := func(member, kind string, at int64) event {
		return event{Event: lease.Event{Event: kind, MonoNS: at}, Member: member}
	}
	events := []event{
		ev("a", lease.EventElected, 10),
		ev("b", lease.EventElected, 20), // a still leads: two at once
		ev("a", lease.EventLost, 30),
		ev("c", lease.EventElected, 40),
		ev("b", lease.EventRenewed, 45),
	}
	if got := maxLeaders(events, nil); got != 2 {
		t.Errorf("maxLeaders = %d, want 2", got)
	}
	// b dies at 35, before c is elected: never more than one after a.
	handover := []event{ev("a", lease.EventElected, 10), ev("a", lease.EventReleased, 15), ev("b", lease.EventElected, 20), ev("c", lease.EventElected, 40)}
	if got := maxLeaders(handover, map[string]int64{"b": 35}); got != 1 {
		t.Errorf("maxLeaders with a handover and a death = %d, want 1", got)
	}
}

// A SIGKILLed participant's life ends when the lab sent the signal, not
// when the lab got round to seeing it exit: a successor woken by the death
// may announce itself in between.
func TestKilledMemberEndsAtTheSignal(t *testing.T) {
	g := newGroup()
	defer g.stop()
	if err := g.start("p1", exec.Command("sleep", "60")); err != nil {
		t.Fatal(err)
	}
	at, err := g.signal("p1", syscall.SIGKILL)
	if err != nil {
		t.Fatal(err)
	}
	<-g.members["p1"].done
	if got := g.exitTimes()["p1"]; got != at {
		t.Errorf("exitTimes()[p1] = %d, want the kill time %d (exit seen at %d)", got, at, g.members["p1"].exitMono)
	}
}

func TestResourceServer(t *testing.T) {
	path := filepath.Join(t.TempDir(), "r.sock")
	s, err := serveResource(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	conn, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	r := bufio.NewReader(conn)
	for _, tt := range []struct{ line, want string }{{"2 a", "ok"}, {"3 b", "ok"}, {"2 a", "stale"}, {"x y", "bad"}, {"3", "bad"}} {
		fmt.Fprintln(conn, tt.line)
		got, err := r.ReadString('\n')
		if err != nil || strings.TrimSpace(got) != tt.want {
			t.Errorf("write %q: reply %q, %v; want %q", tt.line, got, err, tt.want)
		}
	}
	if s.resource.Highest() != 3 || len(s.resource.Check()) != 0 {
		t.Errorf("resource: highest %d, check %v", s.resource.Highest(), s.resource.Check())
	}
}

func TestChildUsage(t *testing.T) {
	for name, args := range map[string][]string{
		"contend without a method": {"--path", "/tmp/x", "--id", "a"},
		"contend, bad method":      {"--path", "/tmp/x", "--id", "a", "--method", "flock"},
		"contend, bad flag":        {"--bogus"},
	} {
		if code := contendChild(args); code != 2 {
			t.Errorf("%s: exit %d, want 2", name, code)
		}
	}
	if code := articlesLeaseChild(nil); code != 2 {
		t.Errorf("articles-lease without --path: exit %d, want 2", code)
	}
	if code := fencedLeaderChild([]string{"--store", "file:///tmp/x"}); code != 2 {
		t.Errorf("fenced-leader without --id and --socket: exit %d, want 2", code)
	}
}
