//go:build linux

package file_test

// The six ways an operator or bad luck broke the lock file (issue 20),
// each driven with real `coord elect` processes and checked with the
// Group's merged timeline: one leader at a time, tokens that only grow.

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"coord/lease"
	"coord/lease/eventlog"
	"coord/lease/file"
	"coord/lease/leasetest"

	"golang.org/x/sys/unix"
)

// processWait bounds every wait for a process's event: generous, because
// the machine is shared and a failure must mean more than a slow machine.
const processWait = 60 * time.Second

func storeIn(dir string) string { return "file://" + filepath.Join(dir, "leader.lock") }

func elected(e lease.Event) bool { return e.Event == lease.EventElected }

// renewedTwiceAfter waits for two renewals by id after the instant mark,
// or for its loss, which it reports, as it reports any other participant's
// election after mark.
func renewedTwiceAfter(t *testing.T, g *leasetest.Group, id string, mark int64) {
	t.Helper()
	last := mark
	for range 2 {
		ev := g.WaitEvent(t, processWait, id+"'s renewal", func(e lease.Event) bool {
			return e.ID == id && e.MonoNS > last && (e.Event == lease.EventRenewed || e.Event == lease.EventLost)
		})
		if ev.Event == lease.EventLost {
			t.Errorf("%s lost its lease: %s", id, ev.Error)
			break
		}
		last = ev.MonoNS
	}
	for _, e := range g.Events() {
		if elected(e) && e.ID != id && e.MonoNS > mark {
			t.Errorf("%s was elected with token %d while %s led", e.ID, e.Token, id)
		}
	}
}

// 1. Removing the tenure socket files gives no second leader: a missing
// file is no evidence of death (and the sockets are abstract: there are no
// files to remove).
func TestSocketFilesRemovedGiveNoSecondLeader(t *testing.T) {
	dir := t.TempDir()
	g := leasetest.StartGroup(t, coordBin, storeIn(dir), "leader.lock", 3, "--ttl", "2s")
	leader := g.WaitEvent(t, processWait, "a leader", elected)
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	removed := 0
	for _, e := range entries {
		if e.Type()&fs.ModeSocket != 0 { // rm .leader.lock.*.sock, as it was
			os.Remove(filepath.Join(dir, e.Name()))
			removed++
		}
	}
	t.Logf("removed %d socket files", removed)
	mark := eventlog.MonotonicNow()
	renewedTwiceAfter(t, g, leader.ID, mark)
	if n := g.CheckOneLeader(t); n != 1 {
		t.Errorf("%d elections after the sockets were removed, want 1 (the leader keeps its lease)", n)
	}
}

// 2. Renaming the lock directory and creating another at its path gives no
// second leader and no repeated token: the leader notices at once and
// steps down, and nobody takes over while its tenure socket lives.
func TestSwappedDirectoryGivesNoSecondLeader(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "locks")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	g := leasetest.StartGroup(t, coordBin, storeIn(dir), "leader.lock", 3, "--ttl", "2s")
	leader := g.WaitEvent(t, processWait, "a leader", elected)
	if err := os.Rename(dir, dir+".old"); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	g.WaitEvent(t, processWait, "the old leader stepping down", func(e lease.Event) bool {
		return e.ID == leader.ID && e.Event == lease.EventLost
	})
	next := g.WaitEvent(t, processWait, "a leader in the new directory", func(e lease.Event) bool {
		return elected(e) && e.MonoNS > leader.MonoNS
	})
	if next.Token <= leader.Token {
		t.Errorf("token %d in the new directory, want > %d", next.Token, leader.Token)
	}
	g.CheckOneLeader(t)
}

// 3. Removing every state file keeps tokens growing (as does a reboot with
// the directory on tmpfs, which removes them all), both under a live
// leader, which steps down at once, and with nobody running.
func TestDeletedStateKeepsTokensGrowing(t *testing.T) {
	dir := t.TempDir()
	wipe := func() {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			os.Remove(filepath.Join(dir, e.Name()))
		}
	}
	g := leasetest.StartGroup(t, coordBin, storeIn(dir), "leader.lock", 4, "--ttl", "2s")
	leader := g.WaitEvent(t, processWait, "a leader", elected)
	killed := map[string]bool{}
	for range 2 { // a few tenures, so that there are tokens to lose
		g.Signal(t, leader.ID, syscall.SIGKILL)
		killed[leader.ID] = true
		prev := leader
		leader = g.WaitEvent(t, processWait, "the next leader", func(e lease.Event) bool {
			return elected(e) && e.MonoNS > prev.MonoNS
		})
	}
	wipe()
	g.WaitEvent(t, processWait, "the leader stepping down", func(e lease.Event) bool {
		return e.ID == leader.ID && e.Event == lease.EventLost
	})
	next := g.WaitEvent(t, processWait, "a leader after the wipe", func(e lease.Event) bool {
		return elected(e) && e.MonoNS > leader.MonoNS
	})
	if next.Token <= leader.Token {
		t.Errorf("token %d after the wipe, want > %d", next.Token, leader.Token)
	}
	g.CheckOneLeader(t)

	// Everyone gone, every file gone: a fresh start still goes up.
	for _, id := range []string{"p1", "p2", "p3", "p4"} {
		if !killed[id] {
			g.Signal(t, id, syscall.SIGKILL)
		}
		g.Wait(t, id, processWait)
	}
	wipe()
	fresh := leasetest.StartGroup(t, coordBin, storeIn(dir), "leader.lock", 1, "--ttl", "2s")
	first := fresh.WaitEvent(t, processWait, "a leader after a full wipe", elected)
	if first.Token <= next.Token {
		t.Errorf("token %d after a full wipe, want > %d", first.Token, next.Token)
	}
}

// 4a. A lock held from outside on the old design's guard file blocks
// nobody: after SIGKILL of the leader another is elected within the TTL
// plus the detection time, not after the lock is let go.
func TestHeldGuardLockBlocksNobody(t *testing.T) {
	dir := t.TempDir()
	guard, err := os.OpenFile(filepath.Join(dir, ".leader.lock.guard"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer guard.Close()
	if err := unix.Flock(int(guard.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	const ttl = 2 * time.Second
	g := leasetest.StartGroup(t, coordBin, storeIn(dir), "leader.lock", 3, "--ttl", ttl.String())
	leader := g.WaitEvent(t, processWait, "a leader while the guard is held", elected)
	killed := eventlog.MonotonicNow()
	g.Signal(t, leader.ID, syscall.SIGKILL)
	// The bound is the TTL plus a detection time generous for a loaded
	// machine (the kernel reports the death in microseconds): the old
	// design elected nobody for as long as the lock was held.
	next := g.WaitEvent(t, ttl+15*time.Second, "a leader after SIGKILL while the guard is held", func(e lease.Event) bool {
		return elected(e) && e.MonoNS > killed
	})
	t.Logf("takeover %v after SIGKILL with the guard held", time.Duration(next.MonoNS-killed))
	g.CheckOneLeader(t)
}

// waitStopped waits until process pid is stopped (by a signal), without
// reaping it.
func waitStopped(t *testing.T, pid int) {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		var info unix.Siginfo
		done <- unix.Waitid(unix.P_PID, pid, &info, unix.WSTOPPED|unix.WNOWAIT, nil)
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("waitid(%d, WSTOPPED): %v", pid, err)
		}
	case <-time.After(processWait):
		t.Fatalf("process %d never stopped itself inside its compare-and-swap", pid)
	}
}

// 4b. A process frozen inside its compare-and-swap (SIGSTOP between reading
// the record and linking the next version, through a test hook) blocks
// nobody, and when it continues, long after the version it was about to
// create has come and gone, its stale write takes nothing.
func TestProcessFrozenInsideItsSwapBlocksNobody(t *testing.T) {
	dir := t.TempDir()
	g := leasetest.StartGroup(t, coordBin, storeIn(dir), "leader.lock", 0, "--ttl", "1s")
	pid := g.Add(t, "frozen", "COORD_FILE_TEST_STOP=before-commit")
	waitStopped(t, pid)
	g.Add(t, "p1")
	g.Add(t, "p2")
	leader := g.WaitEvent(t, processWait, "a leader while a contender is frozen mid-swap", elected)
	// Enough renewals that the version the frozen process was about to
	// link has been created and removed since.
	mark := leader.MonoNS
	for range 20 {
		ev := g.WaitEvent(t, processWait, "a renewal", func(e lease.Event) bool {
			return e.ID == leader.ID && e.Event == lease.EventRenewed && e.MonoNS > mark
		})
		mark = ev.MonoNS
	}
	g.Signal(t, "frozen", syscall.SIGCONT)
	g.WaitEvent(t, processWait, "the thawed process to see the leader", func(e lease.Event) bool {
		return e.ID == "frozen" && e.Event == lease.EventLeader
	})
	for _, e := range g.Events() {
		if e.ID == "frozen" && elected(e) {
			t.Errorf("the thawed process was elected with token %d from its stale decision", e.Token)
		}
	}
	g.CheckOneLeader(t)
}

// exitWithin runs cmd and returns its exit code and stderr, failing the
// test if it has not exited within processWait.
func exitWithin(t *testing.T, cmd *exec.Cmd) (int, string) {
	t.Helper()
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode(), stderr.String()
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0, stderr.String()
	case <-time.After(processWait):
		cmd.Process.Kill()
		<-done
		t.Fatalf("%v did not exit within %v; stderr:\n%s", cmd.Args, processWait, lastLines(stderr.String(), 5))
		return 0, ""
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// checkGaveUp checks that a participant facing a lock file it may not
// replace gave up: exit 1, a bounded number of warnings, and a last line
// naming the file and the reason.
func checkGaveUp(t *testing.T, code int, stderr, lock, reason string) {
	t.Helper()
	if code != 1 {
		t.Errorf("exit %d, want 1; stderr:\n%s", code, lastLines(stderr, 5))
	}
	if n := strings.Count(stderr, "WARN"); n > 5 {
		t.Errorf("%d warnings before giving up, want a bounded few", n)
	}
	last := lastLines(stderr, 1)
	if !strings.HasPrefix(last, "coord: ") || !strings.Contains(last, lock) || !strings.Contains(last, reason) {
		t.Errorf("last stderr line %q does not name %s and %q", last, lock, reason)
	}
}

// 5a. A root-owned lock file of mode 000 in a sticky directory, met by
// another user, cannot be replaced: coord elect says so once and exits 1.
func TestForeignLockFileInStickyDirectoryIsAnError(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("SKIPPED, NOT TESTED: needs root, to create a root-owned lock file and run coord as another user (CI runs as root)")
	}
	base, err := os.MkdirTemp("", "coord-sticky-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	os.Chmod(base, 0o755)
	bin := filepath.Join(base, "coord")
	data, err := os.ReadFile(coordBin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(base, "locks")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Chmod(dir, 0o1777); err != nil {
		t.Fatal(err)
	}
	lock := filepath.Join(dir, "leader.lock")
	if err := os.WriteFile(lock, nil, 0o000); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "elect", "--store", "file://"+lock, "--id", "nobody", "--ttl", "1s")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	code, stderr := exitWithin(t, cmd)
	checkGaveUp(t, code, stderr, lock, "sticky")
}

// chattrImmutable makes path immutable, or skips the test loudly where the
// file system or the user cannot, and undoes it when the test ends.
func chattrImmutable(t *testing.T, path string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("SKIPPED, NOT TESTED: chattr +i needs root (CI runs as root)")
	}
	if out, err := exec.Command("chattr", "+i", path).CombinedOutput(); err != nil {
		t.Skipf("SKIPPED, NOT TESTED: chattr +i %s failed (%v: %s); needs an ext4/xfs-like file system", path, err, out)
	}
	t.Cleanup(func() { exec.Command("chattr", "-i", path).Run() })
}

// 5b. An immutable lock file cannot be replaced: a contender says so once
// and exits 1; a leader whose lock file becomes immutable reports lost
// with the reason, then exits 1 the same way.
func TestImmutableLockFileIsAnError(t *testing.T) {
	t.Run("Contender", func(t *testing.T) {
		dir := t.TempDir()
		lock := filepath.Join(dir, "leader.lock")
		if err := os.WriteFile(lock, []byte("kept as it is\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		chattrImmutable(t, lock)
		code, stderr := exitWithin(t, exec.Command(coordBin, "elect", "--store", "file://"+lock, "--ttl", "1s"))
		checkGaveUp(t, code, stderr, lock, "immutable")
	})
	t.Run("Leader", func(t *testing.T) {
		dir := t.TempDir()
		lock := filepath.Join(dir, "leader.lock")
		g := leasetest.StartGroup(t, coordBin, storeIn(dir), "leader.lock", 1, "--ttl", "1s")
		leader := g.WaitEvent(t, processWait, "a leader", elected)
		chattrImmutable(t, lock)
		lost := g.WaitEvent(t, processWait, "the leader's loss", func(e lease.Event) bool {
			return e.ID == leader.ID && e.Event == lease.EventLost
		})
		if !strings.Contains(lost.Error, "immutable") {
			t.Errorf("lost event error %q does not say the lock file is immutable", lost.Error)
		}
		if code := g.Wait(t, leader.ID, processWait); code != 1 {
			t.Errorf("the leader exited %d after its lock file became immutable, want 1", code)
		}
	})
}

// 6. A renewal answered after its deadline is not reported: a leader in
// this process, whose store renews but whose answers are held back (a
// process paused with the answer in flight), steps down at its deadline,
// before the coord elect processes waiting for the lease can be elected,
// and never reports the late renewal.
func TestRenewalAnsweredLateIsNotReported(t *testing.T) {
	dir := t.TempDir()
	b, err := file.Open(filepath.Join(dir, "leader.lock"), file.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	faulty := leasetest.NewFaulty(b)
	g := leasetest.StartGroup(t, coordBin, storeIn(dir), "leader.lock", 0, "--ttl", "2s")
	stamp := eventlog.NewWriter(io.Discard, "in-process")
	record := func(ev lease.Event) {
		ev, _ = stamp.Write(ev)
		g.Record(ev)
	}
	cfg := lease.Config{Name: "leader.lock", Holder: "in-process", TTL: 2 * time.Second,
		RenewDeadline: time.Second, RenewInterval: 200 * time.Millisecond, RetryPeriod: 100 * time.Millisecond}
	var e *lease.Elector
	cfg.Callbacks = lease.Callbacks{
		OnElected: func(ctx context.Context, token uint64) {
			record(lease.Event{Event: lease.EventElected, Holder: cfg.Holder, Token: token})
			<-ctx.Done()
		},
		OnRenewed: func(r lease.Record) {
			record(lease.Event{Event: lease.EventRenewed, Holder: cfg.Holder, Token: r.Token})
		},
		OnLost: func(token uint64, err error) {
			record(lease.Event{Event: lease.EventLost, Holder: cfg.Holder, Token: token, Error: errString(err)})
			e.Resign() // one tenure is what this test watches
		},
	}
	e, err = lease.NewElector(faulty, cfg)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { e.Run(context.Background()); close(done) }()
	t.Cleanup(func() { e.Resign(); faulty.HoldRenewalAnswers(false); <-done })
	g.WaitEvent(t, processWait, "the in-process leader", func(e lease.Event) bool { return e.ID == "in-process" && elected(e) })
	g.Add(t, "p1")
	g.Add(t, "p2")
	g.WaitEvent(t, processWait, "a process watching", func(e lease.Event) bool { return e.Event == lease.EventLeader })

	faulty.HoldRenewalAnswers(true)
	<-faulty.FaultyRenewals()
	next := g.WaitEvent(t, processWait, "a process elected", func(e lease.Event) bool { return elected(e) && e.ID != "in-process" })
	faulty.HoldRenewalAnswers(false)
	<-done
	for _, ev := range g.Events() {
		if ev.ID == "in-process" && ev.Event == lease.EventRenewed && ev.MonoNS > next.MonoNS {
			t.Errorf("the in-process leader reported a renewal after %s was elected", next.ID)
		}
	}
	g.CheckOneLeader(t)
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
