package server

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"
	"unsafe"
)

// TestKVItemRecord checks the one-string record a key is held in: what
// goes in comes out, whatever the key's and value's lengths, a key-only
// item finds it, and the zero item (a miss) reads as revision 0.
func TestKVItemRecord(t *testing.T) {
	for _, c := range []struct{ key, value string }{
		{"k", ""},
		{"key-000000001", strings.Repeat("v", 256)},
		{strings.Repeat("k", 1024), "x"},
		{"\x00\xff", "\x00"},
	} {
		it := newKVItem(c.key, c.value, 7, 1<<40, 1<<63+5)
		if it.key() != c.key || it.value() != c.value {
			t.Fatalf("record of %.20q=%.20q reads back %.20q=%.20q", c.key, c.value, it.key(), it.value())
		}
		if it.createRevision() != 7 || it.revision() != 1<<40 || it.version() != 1<<63+5 {
			t.Fatalf("record of %.20q: revisions %d, %d, %d", c.key, it.createRevision(), it.revision(), it.version())
		}
		if it.size() != int64(len(c.key)+len(c.value)) {
			t.Fatalf("record of %.20q=%.20q: size %d", c.key, c.value, it.size())
		}
		probe := keyItem(c.key)
		if kvLess(probe, it) || kvLess(it, probe) {
			t.Fatalf("key-only item of %.20q does not equal its record", c.key)
		}
		if probe.key() != c.key || probe.revision() != 0 {
			t.Fatalf("key-only item of %.20q: key %.20q, revision %d", c.key, probe.key(), probe.revision())
		}
		kv := it.keyValue()
		if kv.Key != c.key || string(kv.Value) != c.value || (c.value == "" && kv.Value != nil) || kv.Version != 1<<63+5 {
			t.Fatalf("keyValue of %.20q=%.20q: %+v", c.key, c.value, kv)
		}
	}
	if (kvItem{}).revision() != 0 {
		t.Fatal("the zero item has a revision")
	}
	// A prefix sorts first, as the keys themselves do.
	if !kvLess(newKVItem("a", "zz", 1, 1, 1), newKVItem("ab", "", 1, 1, 1)) {
		t.Fatal(`"a" does not sort before "ab"`)
	}
}

// TestKVItemIsAStringHeader keeps the B-tree's slot per key at a string
// header: a tree node holds room for twice the degree of them, about half
// used after an ordered load, and a snapshot's copy-on-write copies the
// node for every write that reaches it (docs/BENCHMARKS.md, "Memory at
// 500k keys").
func TestKVItemIsAStringHeader(t *testing.T) {
	if got := unsafe.Sizeof(kvItem{}); got != unsafe.Sizeof("") {
		t.Fatalf("kvItem is %d bytes, want a string header's %d", got, unsafe.Sizeof(""))
	}
}

// BenchmarkMachineMemoryAtScale loads 500,000 keys of 256 bytes in key
// order (as bench/scale/loadgen does) and reports the live heap they take
// per key, then the heap a snapshot view pins while 20,000 random
// overwrites go on (the copy-on-write copies of the tree's nodes and the
// values replaced): the machine's part of a server's memory at 500k keys.
//
//	go test ./server -run '^$' -bench MachineMemoryAtScale -benchtime 1x
func BenchmarkMachineMemoryAtScale(b *testing.B) {
	const keys, writes = 500_000, 20_000
	for range b.N {
		before := liveHeapBytes()
		m := NewMachine(DefaultLimits())
		value := make([]byte, 256)
		for i := range keys {
			m.ApplyCommand(uint64(i+1), Command{Op: OpPut, Key: fmt.Sprintf("k%08d", i), Value: value})
		}
		loaded := liveHeapBytes()
		view := m.SnapshotView()
		rng := rand.New(rand.NewPCG(1, 2))
		for i := range writes {
			m.ApplyCommand(uint64(keys+i+1), Command{Op: OpPut, Key: fmt.Sprintf("k%08d", rng.IntN(keys)), Value: value})
		}
		pinned := liveHeapBytes()
		runtime.KeepAlive(view)
		runtime.KeepAlive(m)
		b.ReportMetric(float64(loaded-before)/keys, "live-B/key")
		b.ReportMetric(float64(loaded-before)/1e6, "live-MB")
		b.ReportMetric(float64(pinned-loaded)/1e6, "view-pinned-MB")
	}
}

func liveHeapBytes() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}
