package server

import (
	"fmt"
	"io"
	"math/rand/v2"
	"testing"
)

// BenchmarkMachinePutAtScale overwrites random keys of a machine holding
// 10,000 or 500,000 keys of 256 bytes: what one applied write costs as the
// state grows (issue 21, "The steady rate at 500k keys"). view-every takes
// a snapshot view every that many writes, as the node's trigger does
// (every 10,000 at 10k keys; about every 130,000 at 500k with
// --snapshot-log-percent 25): the copy-on-write trees then copy each node
// a write reaches once; 1073741824 takes none.
func BenchmarkMachinePutAtScale(b *testing.B) {
	for _, c := range []struct{ keys, viewEvery int }{{10_000, 10_000}, {10_000, 1 << 30}, {500_000, 130_000}, {500_000, 1 << 30}} {
		keys := c.keys
		b.Run(fmt.Sprintf("keys=%d/view-every=%d", keys, c.viewEvery), func(b *testing.B) {
			m := NewMachine(DefaultLimits())
			value := make([]byte, 256)
			index := uint64(0)
			for i := range keys {
				index++
				m.ApplyCommand(index, Command{Op: OpPut, Key: fmt.Sprintf("key-%09d", i), Value: value})
			}
			names := make([]string, keys)
			for i := range names {
				names[i] = fmt.Sprintf("key-%09d", i)
			}
			rng := rand.New(rand.NewPCG(1, 2))
			var view *SnapshotView
			b.ResetTimer()
			for i := range b.N {
				if i%c.viewEvery == 0 {
					view = m.SnapshotView()
				}
				index++
				m.ApplyCommand(index, Command{Op: OpPut, Key: names[rng.IntN(keys)], Value: value})
			}
			b.StopTimer()
			if view != nil {
				_, _ = view.WriteTo(io.Discard) // keeps the view alive to the end
			}
		})
	}
}
