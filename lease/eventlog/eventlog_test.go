package eventlog_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"sync"
	"testing"

	"coord/lease"
	"coord/lease/eventlog"
)

// TestWriteStampsEachLine checks that every event is one JSON line carrying
// the writer's id and pid, and, where the platform has the shared clock,
// monotonic times that never go back.
func TestWriteStampsEachLine(t *testing.T) {
	var buf bytes.Buffer
	w := eventlog.NewWriter(&buf, "p1")
	first, err := w.Write(lease.Event{Event: lease.EventElected, Holder: "p1", Token: 7})
	if err != nil {
		t.Fatalf("Write: %v", err)
	}
	second, err := w.Write(lease.Event{Event: lease.EventRenewed, Holder: "p1", Token: 7})
	if err != nil {
		t.Fatalf("Write: %v", err)
	}
	var got []lease.Event
	sc := bufio.NewScanner(&buf)
	for sc.Scan() {
		var ev lease.Event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		got = append(got, ev)
	}
	if len(got) != 2 {
		t.Fatalf("%d lines, want 2", len(got))
	}
	for i, ev := range got {
		if ev.ID != "p1" || ev.PID != os.Getpid() || ev.Time.IsZero() {
			t.Fatalf("line %d: id %q pid %d time %v, want p1, %d and a time", i, ev.ID, ev.PID, ev.Time, os.Getpid())
		}
	}
	if got[0].MonoNS != first.MonoNS || got[1].MonoNS != second.MonoNS {
		t.Fatalf("returned events (mono %d, %d) differ from the lines written (%d, %d)", first.MonoNS, second.MonoNS, got[0].MonoNS, got[1].MonoNS)
	}
	if runtime.GOOS == "linux" || runtime.GOOS == "darwin" {
		if first.MonoNS <= 0 || second.MonoNS < first.MonoNS {
			t.Fatalf("monotonic times %d then %d, want positive and not decreasing", first.MonoNS, second.MonoNS)
		}
	}
}

// TestConcurrentWritesStayWhole checks that events written from many
// goroutines at once come out as whole lines.
func TestConcurrentWritesStayWhole(t *testing.T) {
	const writers, each = 8, 50
	var buf bytes.Buffer
	w := eventlog.NewWriter(&buf, "p")
	var wg sync.WaitGroup
	errs := make(chan error, writers*each)
	for g := range writers {
		wg.Go(func() {
			for i := range each {
				if _, err := w.Write(lease.Event{Event: lease.EventRenewed, Holder: fmt.Sprintf("h%d-%d", g, i)}); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("Write: %v", err)
	}
	lines := 0
	sc := bufio.NewScanner(&buf)
	for sc.Scan() {
		var ev lease.Event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("line %d %q: %v", lines, sc.Text(), err)
		}
		lines++
	}
	if lines != writers*each {
		t.Fatalf("%d lines, want %d", lines, writers*each)
	}
}
