package vfs_test

import (
	"bytes"
	"errors"
	"math/bits"
	"testing"

	"coord/storage/vfs"
)

func TestFaultFSFailNth(t *testing.T) {
	f := vfs.NewFaultFS(vfs.NewMemFS(), 1, vfs.FailNth(2, vfs.FaultError, vfs.OpSync))
	file, err := f.Create("/f")
	must(t, err)
	must(t, file.Sync())
	if err := file.Sync(); !errors.Is(err, vfs.ErrInjected) {
		t.Fatalf("second Sync: %v, want ErrInjected", err)
	}
	must(t, file.Sync())
}

func TestFaultFSShortWrite(t *testing.T) {
	m := vfs.NewMemFS()
	f := vfs.NewFaultFS(m, 3, vfs.FailNth(1, vfs.FaultShortWrite, vfs.OpWrite))
	file, err := f.Create("/f")
	must(t, err)
	data := []byte("0123456789")
	n, err := file.Write(data)
	if !errors.Is(err, vfs.ErrInjected) || n >= len(data) {
		t.Fatalf("short write: n=%d err=%v, want n < %d and ErrInjected", n, err, len(data))
	}
	if got := readFile(t, m, "/f"); got != string(data[:n]) {
		t.Fatalf("file holds %q, want the %d-byte prefix", got, n)
	}
}

func TestFaultFSBitFlipOnWrite(t *testing.T) {
	m := vfs.NewMemFS()
	f := vfs.NewFaultFS(m, 5, vfs.FailNth(1, vfs.FaultBitFlip, vfs.OpWrite))
	file, err := f.Create("/f")
	must(t, err)
	data := []byte("some data to flip")
	orig := bytes.Clone(data)
	if _, err := file.Write(data); err != nil {
		t.Fatalf("a bit-flipped write must succeed silently: %v", err)
	}
	if !bytes.Equal(data, orig) {
		t.Fatal("the caller's buffer was modified")
	}
	got, err := vfs.ReadFile(m, "/f")
	must(t, err)
	if d := bitDiff(got, orig); d != 1 {
		t.Fatalf("file differs from the data written in %d bits, want 1", d)
	}
}

func TestFaultFSBitFlipOnRead(t *testing.T) {
	m := vfs.NewMemFS()
	writeFile(t, m, "/f", "some data to flip")
	f := vfs.NewFaultFS(m, 9, vfs.FailNth(1, vfs.FaultBitFlip, vfs.OpRead))
	got, err := vfs.ReadFile(f, "/f")
	must(t, err)
	if d := bitDiff(got, []byte("some data to flip")); d != 1 {
		t.Fatalf("read differs in %d bits, want 1", d)
	}
	if got := readFile(t, m, "/f"); got != "some data to flip" {
		t.Fatal("a read fault changed the file")
	}
}

func bitDiff(a, b []byte) int {
	if len(a) != len(b) {
		return -1
	}
	d := 0
	for i := range a {
		d += bits.OnesCount8(a[i] ^ b[i])
	}
	return d
}

func TestFaultFSErrorOnEveryKind(t *testing.T) {
	m := vfs.NewMemFS()
	writeFile(t, m, "/f", "x")
	f := vfs.NewFaultFS(m, 1, func(vfs.Op) vfs.Fault { return vfs.FaultError })
	for what, err := range map[string]error{
		"Create":     func() error { _, err := f.Create("/g"); return err }(),
		"Open":       func() error { _, err := f.Open("/f"); return err }(),
		"OpenAppend": func() error { _, err := f.OpenAppend("/f"); return err }(),
		"Remove":     f.Remove("/f"),
		"Rename":     f.Rename("/f", "/g"),
		"MkdirAll":   f.MkdirAll("/d"),
		"List":       func() error { _, err := f.List("/"); return err }(),
		"SyncDir":    f.SyncDir("/"),
	} {
		if !errors.Is(err, vfs.ErrInjected) {
			t.Errorf("%s: %v, want ErrInjected", what, err)
		}
	}
	if got := readFile(t, m, "/f"); got != "x" {
		t.Fatal("a failed operation changed the file system")
	}
}

func TestProbabilisticIsSeeded(t *testing.T) {
	count := func(seed uint64) (n int, pattern []bool) {
		inj := vfs.Probabilistic(seed, 0.1, vfs.FaultError, vfs.OpWrite)
		for i := range 1000 {
			hit := inj(vfs.Op{Kind: vfs.OpWrite, Seq: i + 1}) == vfs.FaultError
			pattern = append(pattern, hit)
			if hit {
				n++
			}
			if inj(vfs.Op{Kind: vfs.OpSync}) != vfs.NoFault {
				t.Fatal("Probabilistic injected into a kind it was not given")
			}
		}
		return n, pattern
	}
	n1, p1 := count(7)
	_, p2 := count(7)
	for i := range p1 {
		if p1[i] != p2[i] {
			t.Fatal("the same seed gave different faults")
		}
	}
	// With p = 0.1 over 1000 draws, 50..150 holds for any sane generator.
	if n1 < 50 || n1 > 150 {
		t.Fatalf("%d faults in 1000 draws at p=0.1", n1)
	}
}

func TestOpKindString(t *testing.T) {
	if got := vfs.OpSync.String(); got != "sync" {
		t.Fatalf("OpSync.String() = %q", got)
	}
	if got := vfs.OpKind(200).String(); got != "OpKind(200)" {
		t.Fatalf("unknown kind String() = %q", got)
	}
}
