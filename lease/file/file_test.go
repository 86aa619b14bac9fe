//go:build linux

package file_test

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"coord/internal/leasekit/leasekittest"
	"coord/lease"
	"coord/lease/file"
	"coord/lease/leasetest"
)

// coordBin is the coord binary built once by TestMain for the process tests.
var coordBin string

func TestMain(m *testing.M) { os.Exit(leasekittest.MainWithCoord(m, &coordBin)) }

// openIn returns a newBackend function for leasetest: every Backend it
// opens shares dir.
func openIn(dir string) func(t *testing.T) lease.Backend {
	return func(t *testing.T) lease.Backend {
		b, err := file.Open(filepath.Join(dir, "leader.lock"), file.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
}

// The suite runs with a one-second TTL (its Elector check then has a 2 s
// renew deadline): every change here creates and removes a directory
// entry, and under the race detector on a loaded machine a quarter-second
// TTL left too little room for one renewal.
func TestConformance(t *testing.T) {
	leasetest.RunWithOptions(t, openIn(t.TempDir()), leasetest.Options{TTL: time.Second})
}

func TestProcesses(t *testing.T) {
	leasetest.RunProcesses(t, coordBin, "file://"+filepath.Join(t.TempDir(), "leader.lock"), leasetest.ProcessOptions{})
}

// logBuffer is a slog destination for tests, safe for concurrent use.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func openLogged(t *testing.T, path string) (*file.Backend, *logBuffer) {
	t.Helper()
	logs := &logBuffer{}
	b, err := file.Open(path, file.Options{Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b, logs
}

// damages are lock file contents that no correct writer leaves behind.
var damages = map[string]func(valid []byte) []byte{
	"empty (touch)":  func([]byte) []byte { return nil },
	"garbage":        func([]byte) []byte { return []byte("not a lease\x00\xff") },
	"truncated":      func(v []byte) []byte { return v[:len(v)/2] },
	"bad checksum":   func(v []byte) []byte { w := bytes.Clone(v); w[len(w)-5] ^= 1; return w },
	"articles' JSON": func([]byte) []byte { return []byte(`{"processId":1,"leaseUntil":9999999999}`) },
}

// recordFiles returns the record files of leader.lock in dir, oldest first.
func recordFiles(t *testing.T, dir string) []string {
	t.Helper()
	matches, err := filepath.Glob(filepath.Join(dir, ".leader.lock.v*"))
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(matches, func(a, b string) int { return cmp.Compare(len(a), len(b))*2 + cmp.Compare(a, b) })
	return matches
}

// The lock file is a copy for people: damage to it wedges nobody and
// changes no decision, and the next operation rewrites it.
func TestDamagedLockFileIsRewritten(t *testing.T) {
	for what, damage := range damages {
		t.Run(what, func(t *testing.T) {
			ctx := context.Background()
			path := filepath.Join(t.TempDir(), "leader.lock")
			b, logs := openLogged(t, path)
			if err := os.WriteFile(path, damage([]byte("coord-lease/v2 00000000 {}\n")), 0o644); err != nil {
				t.Fatal(err)
			}
			rec, err := b.Acquire(ctx, "leader.lock", "alice", time.Minute)
			if err != nil {
				t.Fatalf("Acquire over a damaged lock file: %v", err)
			}
			if !strings.Contains(logs.String(), "repairing lock file") {
				t.Errorf("no repair logged; logs:\n%s", logs)
			}
			data, err := os.ReadFile(path)
			if err != nil || !bytes.HasPrefix(data, []byte("coord-lease/v2 ")) || !bytes.Contains(data, []byte(`"holder":"alice"`)) {
				t.Errorf("lock file after the acquisition: %q, %v", data, err)
			}
			if err := os.WriteFile(path, damage(data), 0o644); err != nil {
				t.Fatal(err)
			}
			if got, err := b.Get(ctx, "leader.lock"); err != nil || got.Token != rec.Token || got.Holder != "alice" {
				t.Errorf("Get with a damaged lock file = %+v, %v", got, err)
			}
		})
	}
}

// A damaged record file wedges nobody: with no live holder the lease is
// taken over, the damaged file removed, and the removal logged.
func TestDamagedRecordFileIsRemoved(t *testing.T) {
	for what, damage := range damages {
		t.Run(what, func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			b, logs := openLogged(t, filepath.Join(dir, "leader.lock"))
			first, err := b.Acquire(ctx, "leader.lock", "alice", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if err := b.Release(ctx, "leader.lock", "alice", first.Token); err != nil {
				t.Fatal(err)
			}
			files := recordFiles(t, dir)
			newest := files[len(files)-1]
			valid, _ := os.ReadFile(newest)
			if err := os.WriteFile(newest, damage(valid), 0o644); err != nil {
				t.Fatal(err)
			}
			rec, err := b.Acquire(ctx, "leader.lock", "bob", time.Minute)
			if err != nil {
				t.Fatalf("Acquire over a damaged record file: %v", err)
			}
			if rec.Token <= first.Token {
				t.Errorf("token %d after %d", rec.Token, first.Token)
			}
			if !strings.Contains(logs.String(), "removing a damaged record file") {
				t.Errorf("no removal logged; logs:\n%s", logs)
			}
			if _, err := os.Stat(newest); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("damaged record file %s still there: %v", newest, err)
			}
		})
	}
}

// A record file damaged under a live holder ends that holder's tenure (its
// record is gone: it steps down), but nobody takes the lease while the
// holder lives: the kernel still lists its tenure socket, which is
// recorded as an unknown holder until it closes or its TTL passes.
func TestDamagedRecordUnderLiveHolder(t *testing.T) {
	for what, damage := range damages {
		t.Run(what, func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			path := filepath.Join(dir, "leader.lock")
			a, _ := openLogged(t, path)
			b, logs := openLogged(t, path)
			rec, err := a.Acquire(ctx, "leader.lock", "alice", time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			files := recordFiles(t, dir)
			valid, _ := os.ReadFile(files[len(files)-1])
			if err := os.WriteFile(files[len(files)-1], damage(valid), 0o644); err != nil {
				t.Fatal(err)
			}
			got, err := b.Acquire(ctx, "leader.lock", "bob", time.Minute)
			if !errors.Is(err, lease.ErrHeld) || got.Token != rec.Token {
				t.Fatalf("Acquire by bob = %+v, %v; want ErrHeld under alice's token %d", got, err, rec.Token)
			}
			if !strings.Contains(logs.String(), "has no record") {
				t.Errorf("the unknown holder was not logged; logs:\n%s", logs)
			}
			if _, err := a.Renew(ctx, "leader.lock", "alice", rec.Token, time.Hour); !errors.Is(err, lease.ErrLost) {
				t.Errorf("alice's Renew after her record was damaged: %v, want ErrLost", err)
			}
			// She hands the lease back, as an Elector does after a loss:
			// her tenure socket closes, and bob may go.
			if err := a.Release(ctx, "leader.lock", "alice", rec.Token); !errors.Is(err, lease.ErrLost) {
				t.Errorf("alice's Release after her loss: %v, want ErrLost", err)
			}
			next, err := b.Acquire(ctx, "leader.lock", "bob", time.Minute)
			if err != nil || next.Token <= rec.Token {
				t.Errorf("bob's Acquire after alice stepped down = %+v, %v", next, err)
			}
		})
	}
}

// Tokens keep growing when the lock file is deleted or garbled between
// tenures: the guard keeps the high-water mark.
func TestTokensSurviveALostLockFile(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "leader.lock")
	b, _ := openLogged(t, path)
	var last uint64
	for i, damage := range []func(){
		func() {},
		func() { os.Remove(path) },
		func() { os.WriteFile(path, nil, 0o644) },
		func() { os.WriteFile(path, []byte("garbage"), 0o644) },
	} {
		damage()
		rec, err := b.Acquire(ctx, "leader.lock", "alice", time.Minute)
		if err != nil {
			t.Fatalf("round %d: %v", i, err)
		}
		if rec.Token <= last {
			t.Fatalf("round %d: token %d after %d", i, rec.Token, last)
		}
		last = rec.Token
		if err := b.Release(ctx, "leader.lock", "alice", rec.Token); err != nil {
			t.Fatal(err)
		}
	}
}

// A holder that is alive but never renews loses the lease at its TTL; one
// that dies loses it at once. Neither case polls: the TTL here is an hour.
func TestDeadHolderNoticedAtOnce(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "leader.lock")
	a, _ := openLogged(t, path)
	w, _ := openLogged(t, path)
	if _, err := a.Acquire(ctx, "leader.lock", "alice", time.Hour); err != nil {
		t.Fatal(err)
	}
	ch, err := w.Watch(ctx, "leader.lock")
	if err != nil {
		t.Fatal(err)
	}
	if first := <-ch; first.Holder != "alice" {
		t.Fatalf("first watch record %+v, want alice's", first)
	}
	a.Close() // a crash, as far as others can tell
	timeout := time.After(30 * time.Second)
	for {
		select {
		case rec := <-ch:
			if rec.Free() {
				if _, err := w.Acquire(ctx, "leader.lock", "bob", time.Hour); err != nil {
					t.Fatalf("Acquire after the holder died: %v", err)
				}
				return
			}
		case <-timeout:
			t.Fatal("the watcher was not told that the holder died (its TTL is an hour)")
		}
	}
}

func TestOpenRejectsBadInput(t *testing.T) {
	dir := t.TempDir()
	notDir := filepath.Join(dir, "plain")
	os.WriteFile(notDir, nil, 0o644)
	tests := map[string]string{
		"relative path":         "leader.lock",
		"missing directory":     filepath.Join(dir, "missing", "leader.lock"),
		"file as directory":     filepath.Join(notDir, "leader.lock"),
		"unwritable directory":  "/proc/1/leader.lock",
		"hidden name":           filepath.Join(dir, ".leader.lock"),
		"name too long":         filepath.Join(dir, strings.Repeat("x", 65)),
		"directory, not a file": dir + "/",
	}
	for what, path := range tests {
		if b, err := file.Open(path, file.Options{}); !errors.Is(err, lease.ErrInvalid) {
			if b != nil {
				b.Close()
			}
			t.Errorf("%s: Open(%q) error %v, want ErrInvalid", what, path, err)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("failed Opens left files behind: %v", entries)
	}
	for _, url := range []string{"file://otherhost/tmp/leader.lock", "file:"} {
		if _, err := lease.Open(context.Background(), url); !errors.Is(err, lease.ErrInvalid) {
			t.Errorf("lease.Open(%q) = %v, want ErrInvalid", url, err)
		}
	}
	b, err := lease.Open(context.Background(), "file://"+filepath.Join(dir, "leader.lock"))
	if err != nil {
		t.Fatalf("lease.Open of a good file URL: %v", err)
	}
	defer b.Close()
	if name := lease.DefaultName(b, "coord"); name != "leader.lock" {
		t.Errorf("DefaultName = %q, want leader.lock", name)
	}
}

// Leftovers of writers that died (temporary records) are removed by the
// next acquisition, and only they: the files of a lease whose name starts
// like a temporary record are kept.
func TestLeftoverTemporaryRecordsAreRemoved(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	b, err := file.Open(filepath.Join(dir, "leader.lock"), file.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	leftover := filepath.Join(dir, ".leader.lock.tmp-12345")
	if err := os.WriteFile(leftover, []byte("coord-lease/v2 half a rec"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A temporary file is a leftover once it is older than a minute (a
	// live writer's lives for microseconds).
	old := time.Now().Add(-2 * time.Minute)
	if err := os.Chtimes(leftover, old, old); err != nil {
		t.Fatal(err)
	}
	// Another lease whose name begins like a temporary record.
	other, err := b.Acquire(ctx, "leader.lock.tmp-7", "bob", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Acquire(ctx, "leader.lock", "alice", time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(leftover); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("leftover temporary record still there: %v", err)
	}
	got, err := b.Get(ctx, "leader.lock.tmp-7")
	if err != nil || got.Holder != "bob" || got.Token != other.Token {
		t.Errorf("the other lease after the cleanup: %+v, %v", got, err)
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.Contains(e.Name(), ".tmp-") && !strings.HasPrefix(e.Name(), ".leader.lock.tmp-7.") && e.Name() != "leader.lock.tmp-7" {
			t.Errorf("stray file %s", e.Name())
		}
	}
}

// Records are replaced by an exchange: a reader polling the lock file while
// a holder renews as fast as it can never sees it missing, empty or partial.
func TestReadersNeverSeeAPartialRecord(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "leader.lock")
	b, err := file.Open(path, file.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	rec, err := b.Acquire(ctx, "leader.lock", "alice", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var renewErr error
	go func() {
		defer close(done)
		for range 500 {
			if _, err := b.Renew(ctx, "leader.lock", "alice", rec.Token, time.Minute); err != nil {
				renewErr = err
				return
			}
		}
	}()
	reads := 0
	for {
		select {
		case <-done:
			if renewErr != nil {
				t.Fatal(renewErr)
			}
			if reads == 0 {
				t.Fatal("the reader never read")
			}
			return
		default:
		}
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("read %d: %v", reads, err)
		}
		if !bytes.HasPrefix(data, []byte("coord-lease/v2 ")) || !bytes.HasSuffix(data, []byte("}\n")) {
			t.Fatalf("read %d saw a partial record: %q", reads, data)
		}
		reads++
	}
}

// A watcher sees a renewal: the record replaced by an exchange is reported
// by inotify as it was by a rename (nothing else would wake the watcher
// here: the holder's socket stays open and the lease has a minute to run).
func TestWatchSeesExchangedRecords(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir := t.TempDir()
	holder, err := file.Open(filepath.Join(dir, "leader.lock"), file.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	watcher, err := file.Open(filepath.Join(dir, "leader.lock"), file.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer watcher.Close()
	rec, err := holder.Acquire(ctx, "leader.lock", "alice", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	ch, err := watcher.Watch(ctx, "leader.lock")
	if err != nil {
		t.Fatal(err)
	}
	first := <-ch
	if first.Holder != "alice" {
		t.Fatalf("first record %+v", first)
	}
	renewed, err := holder.Renew(ctx, "leader.lock", "alice", rec.Token, 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	timeout := time.After(30 * time.Second)
	for {
		select {
		case r := <-ch:
			if r.Expiry.After(first.Expiry.Add(30 * time.Second)) {
				return // the renewal to two minutes
			}
		case <-timeout:
			t.Fatalf("the watcher never saw the renewal to %v", renewed.Expiry)
		}
	}
}
