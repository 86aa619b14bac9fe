//go:build linux

package localcluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"coord/client"
	"coord/internal/leasekit/leasekittest"
)

// mountTmpfs mounts a tmpfs of size (as mount's size= option: "8m") on
// dir, and unmounts it when the test ends. Mounting needs root (CI runs
// the tests as root): elsewhere the test is skipped, loudly; with
// COORD_TEST_REQUIRE_SERVERS=1 and root, a failed mount fails the test.
func mountTmpfs(tb testing.TB, dir, size string) {
	tb.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput()
	if err != nil {
		msg := fmt.Sprintf("DISK-FULL TEST NOT RUN: cannot mount a tmpfs on %s (%v: %s); it needs root (uid %d here)",
			dir, err, strings.TrimSpace(string(out)), os.Getuid())
		if os.Getuid() == 0 && os.Getenv(leasekittest.RequireServersEnv) == "1" {
			tb.Fatal(msg)
		}
		tb.Skip(msg)
	}
	tb.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			tb.Errorf("umount %s: %v: %s", dir, err, out)
			_ = exec.Command("umount", "-l", dir).Run()
		}
	})
}

// fill writes a file that leaves about free bytes available on dir's file
// system, and returns its name.
func fill(tb testing.TB, dir string, free int64) string {
	tb.Helper()
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		tb.Fatal(err)
	}
	avail := int64(st.Bavail) * st.Bsize
	name := filepath.Join(dir, "filler")
	f, err := os.Create(name)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 64<<10)
	for n := avail - free; n > 0; n -= int64(len(chunk)) {
		if _, err := f.Write(chunk[:min(int64(len(chunk)), n)]); err != nil {
			tb.Fatalf("fill %s: %v", name, err)
		}
	}
	return name
}

// diskFullRun is one node on an 8 MiB tmpfs: its disk is filled until
// writes fail, then space returns.
type diskFullRun struct {
	c  *Cluster
	cl *client.Client
	// once makes one attempt per write, however long it takes: its answer
	// is the node's own, never a context that cut an attempt short (which
	// leaves the outcome unknown).
	once  *client.Client
	data  string
	acked map[string]bool // keys whose Put succeeded
	maybe map[string]bool // keys whose Put has an unknown outcome
	seq   int
}

func startDiskFull(tb testing.TB, tick string) *diskFullRun {
	tb.Helper()
	root := tb.TempDir()
	r := &diskFullRun{data: filepath.Join(root, "node-1"), acked: map[string]bool{}, maybe: map[string]bool{}}
	mountTmpfs(tb, r.data, "8m")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := Start(ctx, Config{Nodes: 1, Dir: root, Binary: os.Args[0], SelfServe: true,
		Args: []string{"--tick", tick, "--snapshot-entries", "100000"}})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(c.Close) // before the unmount
	r.c = c
	if _, err := c.WaitLeader(ctx); err != nil {
		tb.Fatal(err)
	}
	cfg := c.ClientConfig()
	cfg.AttemptTimeout = 500 * time.Millisecond
	if r.cl, err = client.New(cfg); err != nil {
		tb.Fatal(err)
	}
	return r
}

// put writes the next key; it reports whether it succeeded, and the error.
func (r *diskFullRun) put(wait time.Duration) (string, error) {
	r.seq++
	key := fmt.Sprintf("key-%05d", r.seq)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	_, err := r.cl.Put(ctx, key, []byte(strings.Repeat("x", 2048)))
	switch {
	case err == nil:
		r.acked[key] = true
	case errors.Is(err, client.ErrUnknown):
		r.maybe[key] = true
	}
	return key, err
}

// refusedCode sends one write straight to the node, without the client's
// retries (whose last attempt a context may cut short, leaving the outcome
// unknown), and returns the HTTP status and the API's error code.
func (r *diskFullRun) refusedCode(tb testing.TB) (int, string) {
	tb.Helper()
	acc := r.c.Access()
	scheme := "http"
	hc := &http.Client{Timeout: 30 * time.Second}
	if acc.TLS != nil {
		scheme = "https"
		hc.Transport = &http.Transport{TLSClientConfig: acc.TLS}
	}
	r.seq++
	url := fmt.Sprintf("%s://%s/v1/kv/key-%05d", scheme, r.c.Endpoints()[0], r.seq)
	req, err := http.NewRequest("PUT", url, strings.NewReader(strings.Repeat("x", 2048)))
	if err != nil {
		tb.Fatal(err)
	}
	if acc.Token != "" {
		req.Header.Set("Authorization", "Bearer "+acc.Token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		tb.Fatalf("write on a full disk: %v", err)
	}
	defer resp.Body.Close()
	var body struct {
		Code string `json:"code"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&body)
	return resp.StatusCode, body.Code
}

// fillUp fills the disk and writes until a write is refused with
// disk_full.
func (r *diskFullRun) fillUp(tb testing.TB) string {
	tb.Helper()
	filler := fill(tb, r.data, 128<<10)
	for i := 0; ; i++ {
		_, err := r.put(2 * time.Second)
		if errors.Is(err, client.ErrDiskFull) {
			return filler
		}
		if err != nil && !errors.Is(err, client.ErrUnknown) {
			tb.Fatalf("write %d on a filling disk: %v, want success or disk_full", i, err)
		}
		if i == 1000 {
			tb.Fatal("1000 writes of 2 KiB on 128 KiB of space, and none refused")
		}
	}
}

// recover removes filler and returns how long it took until a write
// succeeded.
func (r *diskFullRun) recover(tb testing.TB, filler string) time.Duration {
	tb.Helper()
	if err := os.Remove(filler); err != nil {
		tb.Fatal(err)
	}
	start := time.Now()
	for {
		_, err := r.put(2 * time.Second)
		if err == nil {
			return time.Since(start)
		}
		if time.Since(start) > time.Minute {
			tb.Fatalf("no write succeeded within a minute of space returning: %v", err)
		}
	}
}

// A node on a real, full tmpfs: writes fail with 507 disk_full, the
// process stays up and says so in /v1/status, reads still answer; when
// space returns, writes succeed again without a restart; and after a kill
// -9 and a restart every acknowledged write is there.
func TestDiskFullOnTmpfs(t *testing.T) {
	r := startDiskFull(t, "20ms")
	filler := r.fillUp(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := r.c.Status(ctx, 1)
	if err != nil {
		t.Fatalf("status of the node with a full disk: %v", err)
	}
	if st.Storage == nil || !st.Storage.DiskFull {
		t.Fatalf("status %+v, want storage.disk_full", st)
	}
	// Refused clearly, again and again, while the disk stays full.
	for range 3 {
		if status, code := r.refusedCode(t); status != http.StatusInsufficientStorage || code != "disk_full" {
			t.Fatalf("write on a full disk: %d %q, want 507 disk_full", status, code)
		}
	}
	var some string
	for k := range r.acked {
		some = k
		break
	}
	if _, err := r.cl.Get(ctx, some, client.Stale()); err != nil {
		t.Fatalf("stale read on a node with a full disk: %v", err)
	}
	took := r.recover(t, filler)
	t.Logf("%d writes acknowledged before the disk was full, %d of unknown outcome; first write %v after space returned",
		len(r.acked), len(r.maybe), took)

	if err := r.c.Kill(1); err != nil {
		t.Fatal(err)
	}
	if err := r.c.Restart(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := r.c.WaitLeader(ctx); err != nil {
		t.Fatal(err)
	}
	for k := range r.acked {
		if _, err := r.cl.Get(ctx, k); err != nil {
			t.Fatalf("acknowledged %s lost after the disk filled, emptied and the node restarted: %v", k, err)
		}
	}
}

// BenchmarkSpaceReturns measures the time from space returning on a full
// disk (a tmpfs) to the first successful write, with the default tick of
// 100 ms (the node retries its storage once per tick).
//
//	go test ./server/localcluster -run '^$' -bench SpaceReturns -benchtime 10x
func BenchmarkSpaceReturns(b *testing.B) {
	r := startDiskFull(b, "100ms")
	var took []time.Duration
	for b.Loop() {
		filler := r.fillUp(b) // the log only grows: each round fills what is left
		took = append(took, r.recover(b, filler))
	}
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "ms-median/recovery")
	b.ReportMetric(float64(took[len(took)-1].Microseconds())/1000, "ms-max/recovery")
}
