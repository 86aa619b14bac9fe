// Command smstore measures the candidate key stores for coord's state
// machine (issue 21, docs/storage.md "Choosing the state machine's
// store"): the Go map of today's server.Machine, a copy-on-write B-tree
// (github.com/google/btree), bbolt and pebble. Each candidate runs in its
// own process (the command re-executes itself), so that its RSS is its own.
//
// For each it loads --keys keys of --value-bytes bytes, then takes a
// snapshot from a point-in-time view while a writer keeps overwriting keys,
// and prints one line of figures: load time per write, the process's CPU
// time for the load, the live Go heap and the RSS after it, how long the
// applying goroutine was stopped to take the view, the time until the
// snapshot was durable and its size, the 99th percentile of the writes
// applied meanwhile, and the peak RSS.
//
//	go run ./smstore --keys 500000
package main

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"flag"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"syscall"
	"time"

	"coord/server"

	"github.com/cockroachdb/pebble/v2"
	"github.com/google/btree"
	bolt "go.etcd.io/bbolt"
)

var (
	keys       = flag.Int("keys", 500000, "keys to load")
	valueBytes = flag.Int("value-bytes", 256, "bytes per value")
	overwrite  = flag.Int("overwrite", 100000, "writes applied while the snapshot is taken")
	candidate  = flag.String("candidate", "", "run one candidate (map, btree, bbolt, pebble); empty: all, each in its own process")
	dir        = flag.String("dir", "", "scratch directory (default: a new temporary one)")
)

// store is what the state machine needs of a key store: apply a write,
// and take a point-in-time view that can be written out while writes go on.
type store interface {
	put(key string, value []byte, index uint64)
	// snapshot returns a function that writes the view taken now; it runs
	// on another goroutine while put goes on (where the store allows; the
	// map's snapshot is taken whole before put may go on).
	snapshot() func(w io.Writer) error
	close()
}

func main() {
	flag.Parse()
	if *candidate == "" {
		fmt.Printf("# %d keys of %d bytes, %d writes during the snapshot, %s, GOMAXPROCS %d\n",
			*keys, *valueBytes, *overwrite, runtime.Version(), runtime.GOMAXPROCS(0))
		fmt.Printf("%-7s %10s %8s %9s %9s %9s %9s %9s %9s %9s\n",
			"store", "load/op", "cpu", "heap MB", "rss MB", "view ms", "snap s", "snap MB", "p99 put", "peak rss")
		for _, c := range []string{"map", "btree", "bbolt", "pebble"} {
			cmd := exec.Command(os.Args[0], append(os.Args[1:], "--candidate", c)...)
			cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
			if err := cmd.Run(); err != nil {
				fmt.Fprintf(os.Stderr, "%s: %v\n", c, err)
				os.Exit(1)
			}
		}
		return
	}
	if err := run(*candidate); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(name string) error {
	scratch := *dir
	if scratch == "" {
		d, err := os.MkdirTemp("", "smstore-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		scratch = d
	}
	var s store
	switch name {
	case "map":
		s = newMapStore()
	case "btree":
		s = newBtreeStore()
	case "bbolt":
		b, err := newBoltStore(filepath.Join(scratch, "bolt.db"))
		if err != nil {
			return err
		}
		s = b
	case "pebble":
		p, err := newPebbleStore(filepath.Join(scratch, "pebble"))
		if err != nil {
			return err
		}
		s = p
	default:
		return fmt.Errorf("unknown candidate %q", name)
	}
	defer s.close()
	value := bytes.Repeat([]byte{'v'}, *valueBytes)
	index := uint64(0)
	cpu0 := cpuTime()
	start := time.Now()
	for i := range *keys {
		index++
		s.put(keyName(i), value, index)
	}
	load := time.Since(start)
	cpu := cpuTime() - cpu0
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	rss := rssMB()

	// The snapshot: a view now, written out on another goroutine while
	// this one keeps applying writes.
	f, err := os.Create(filepath.Join(scratch, "snap"))
	if err != nil {
		return err
	}
	defer f.Close()
	snapStart := time.Now()
	write := s.snapshot()
	view := time.Since(snapStart)
	done := make(chan error, 1)
	go func() {
		w := bufio.NewWriterSize(f, 1<<20)
		err := write(w)
		if err == nil {
			err = w.Flush()
		}
		if err == nil {
			err = f.Sync()
		}
		done <- err
	}()
	var during []time.Duration
	snapDone := time.Duration(0)
	peak := rss
	for i := 0; i < *overwrite || snapDone == 0; i++ {
		index++
		t := time.Now()
		s.put(keyName((i*7919)%*keys), value, index)
		if snapDone == 0 {
			during = append(during, time.Since(t))
		}
		if i%10000 == 0 {
			peak = max(peak, rssMB())
		}
		if snapDone == 0 {
			select {
			case err := <-done:
				if err != nil {
					return err
				}
				snapDone = time.Since(snapStart)
			default:
			}
		}
	}
	st, _ := f.Stat()
	slices.Sort(during)
	p99 := time.Duration(0)
	if len(during) > 0 {
		p99 = during[len(during)*99/100]
	}
	fmt.Printf("%-7s %8.2fµs %7.1fs %9.0f %9.0f %9.1f %9.2f %9.0f %7.0fµs %9.0f\n", name,
		float64(load.Microseconds())/float64(*keys), cpu.Seconds(), float64(ms.HeapAlloc)/(1<<20), rss,
		float64(view.Microseconds())/1000, snapDone.Seconds(), float64(st.Size())/(1<<20),
		float64(p99.Nanoseconds())/1000, peak)
	return nil
}

func keyName(i int) string { return fmt.Sprintf("bench/key/%08d", i) }

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func rssMB() float64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			var kb float64
			fmt.Sscan(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), &kb)
			return kb / 1024
		}
	}
	return 0
}

// mapStore is today's server.Machine: a Go map of *KeyValue; its snapshot
// is Machine.Snapshot, one buffer encoded while nothing else may run.
type mapStore struct{ m *server.Machine }

func newMapStore() *mapStore { return &mapStore{server.NewMachine(server.DefaultLimits())} }

func (s *mapStore) put(key string, value []byte, index uint64) {
	s.m.ApplyCommand(index, server.Command{Op: server.OpPut, Key: key, Value: bytes.Clone(value)})
}

func (s *mapStore) snapshot() func(io.Writer) error {
	data := s.m.Snapshot()
	return func(w io.Writer) error { _, err := w.Write(data); return err }
}

func (s *mapStore) close() {}

// btreeStore is a copy-on-write B-tree of items holding key and value in
// one string: Clone is the point-in-time view.
type btreeItem struct {
	kv                   string // key then value
	keyLen               uint32
	create, rev, version uint64
}

type btreeStore struct{ t *btree.BTreeG[btreeItem] }

func newBtreeStore() *btreeStore {
	return &btreeStore{btree.NewG(32, func(a, b btreeItem) bool { return a.kv[:a.keyLen] < b.kv[:b.keyLen] })}
}

func (s *btreeStore) put(key string, value []byte, index uint64) {
	it := btreeItem{kv: key + string(value), keyLen: uint32(len(key)), create: index, rev: index, version: 1}
	if old, ok := s.t.Get(btreeItem{kv: key, keyLen: uint32(len(key))}); ok {
		it.create, it.version = old.create, old.version+1
	}
	s.t.ReplaceOrInsert(it)
}

func (s *btreeStore) snapshot() func(io.Writer) error {
	view := s.t.Clone()
	return func(w io.Writer) error {
		crc := crc32.New(crc32.MakeTable(crc32.Castagnoli))
		out := io.MultiWriter(w, crc)
		var buf []byte
		var err error
		view.Ascend(func(it btreeItem) bool {
			buf = buf[:0]
			buf = binary.AppendUvarint(buf, uint64(it.keyLen))
			buf = append(buf, it.kv[:it.keyLen]...)
			buf = binary.AppendUvarint(buf, uint64(len(it.kv))-uint64(it.keyLen))
			buf = append(buf, it.kv[it.keyLen:]...)
			buf = binary.AppendUvarint(buf, it.create)
			buf = binary.AppendUvarint(buf, it.rev)
			buf = binary.AppendUvarint(buf, it.version)
			_, err = out.Write(buf)
			return err == nil
		})
		return err
	}
}

func (s *btreeStore) close() {}

// boltStore is bbolt as etcd uses it: writes batched into one transaction
// committed every 1,000 writes (etcd commits every 10,000 or 100 ms),
// without fsync (the Raft log is the durable record); a read transaction
// is the point-in-time view, and WriteTo streams the file it sees.
type boltStore struct {
	db      *bolt.DB
	tx      *bolt.Tx
	pending int
}

var boltBucket = []byte("kv")

func newBoltStore(path string) (*boltStore, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{NoSync: true, NoFreelistSync: true, FreelistType: bolt.FreelistMapType})
	if err != nil {
		return nil, err
	}
	return &boltStore{db: db}, nil
}

func (s *boltStore) put(key string, value []byte, index uint64) {
	if s.tx == nil {
		tx, err := s.db.Begin(true)
		if err != nil {
			panic(err)
		}
		s.tx = tx
	}
	b, err := s.tx.CreateBucketIfNotExists(boltBucket)
	if err != nil {
		panic(err)
	}
	// The value carries the revisions, as etcd's does.
	rec := binary.AppendUvarint(nil, index)
	rec = binary.AppendUvarint(rec, index)
	rec = binary.AppendUvarint(rec, 1)
	if err := b.Put([]byte(key), append(rec, value...)); err != nil {
		panic(err)
	}
	if s.pending++; s.pending == 1000 {
		s.commit()
	}
}

func (s *boltStore) commit() {
	if s.tx != nil {
		if err := s.tx.Commit(); err != nil {
			panic(err)
		}
		s.tx, s.pending = nil, 0
	}
}

func (s *boltStore) snapshot() func(io.Writer) error {
	s.commit()
	tx, err := s.db.Begin(false)
	if err != nil {
		panic(err)
	}
	return func(w io.Writer) error {
		defer tx.Rollback()
		_, err := tx.WriteTo(w)
		return err
	}
}

func (s *boltStore) close() { s.commit(); s.db.Close() }

// pebbleStore is pebble with its write-ahead log off (the Raft log is the
// durable record): one batch per write, committed without sync; a pebble
// Snapshot is the point-in-time view, iterated and encoded.
type pebbleStore struct{ db *pebble.DB }

func newPebbleStore(path string) (*pebbleStore, error) {
	db, err := pebble.Open(path, &pebble.Options{DisableWAL: true, Logger: quietLogger{}})
	if err != nil {
		return nil, err
	}
	return &pebbleStore{db}, nil
}

func (s *pebbleStore) put(key string, value []byte, index uint64) {
	rec := binary.AppendUvarint(nil, index)
	rec = binary.AppendUvarint(rec, index)
	rec = binary.AppendUvarint(rec, 1)
	b := s.db.NewBatch()
	if err := b.Set([]byte(key), append(rec, value...), nil); err != nil {
		panic(err)
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		panic(err)
	}
}

func (s *pebbleStore) snapshot() func(io.Writer) error {
	snap := s.db.NewSnapshot()
	return func(w io.Writer) error {
		defer snap.Close()
		it, err := snap.NewIter(nil)
		if err != nil {
			return err
		}
		defer it.Close()
		var buf []byte
		for it.First(); it.Valid(); it.Next() {
			buf = binary.AppendUvarint(buf[:0], uint64(len(it.Key())))
			buf = append(buf, it.Key()...)
			v := it.Value()
			buf = binary.AppendUvarint(buf, uint64(len(v)))
			buf = append(buf, v...)
			if _, err := w.Write(buf); err != nil {
				return err
			}
		}
		return it.Error()
	}
}

func (s *pebbleStore) close() { s.db.Close() }

func init() { debug.SetGCPercent(100) }

// quietLogger drops pebble's informational lines from the table.
type quietLogger struct{}

func (quietLogger) Infof(string, ...any)              {}
func (quietLogger) Errorf(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }
func (quietLogger) Fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
	os.Exit(1)
}
