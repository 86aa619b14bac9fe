package node

import (
	"bytes"
	"fmt"
	"testing"
	"testing/synctest"
)

// forwarding is a Forwarding for tests: data, and what the loop said.
type forwarding struct {
	data    []byte
	skip    bool
	done    chan Result
	refused error
}

func (f *forwarding) Take() ([]byte, ForwardWaiter, bool) {
	return f.data, ForwardWaiter{Done: func(r Result) { f.done <- r }}, !f.skip
}

func (f *forwarding) Refused(err error) { f.refused = err }

// ForwardEach takes a batch's proposals in order while the loop's batch
// holds less than MaxEntryBytesPerBatch of entry data, the first one
// always, and leaves the rest to its caller; a proposal whose Take says no
// is skipped and hears nothing; the ones it took apply. Unbounded (0), it
// takes the whole batch.
func TestForwardEachBoundsItsBatch(t *testing.T) {
	for _, tc := range []struct {
		name      string
		maxBatch  uint64
		wantTaken int
	}{
		{"bounded", 2 << 20, 2},
		{"unbounded", 0, 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c := startBatchCluster(t, 22, func() Storage { return NewMemoryStorage() }, tc.maxBatch)
				leader := c.waitLeader(0)
				batch := make([]Forwarding, 8)
				for i := range batch {
					batch[i] = &forwarding{data: fmt.Appendf(nil, "k%d=%s", i, bytes.Repeat([]byte{'v'}, 1<<20)), done: make(chan Result, 1)}
				}
				batch[1].(*forwarding).skip = true // given up: skipped, and counts nothing
				taken, err := leader.node.ForwardEach(batch)
				if err != nil {
					t.Fatal(err)
				}
				want := tc.wantTaken
				if tc.maxBatch != 0 {
					want++ // the skipped one added no data
				}
				if taken != want {
					t.Fatalf("ForwardEach took %d of %d proposals of 1 MiB; want %d", taken, len(batch), want)
				}
				for i, f := range batch {
					f := f.(*forwarding)
					switch {
					case f.refused != nil:
						t.Errorf("proposal %d refused: %v", i, f.refused)
					case i >= taken || f.skip:
						select {
						case r := <-f.done:
							t.Errorf("proposal %d, not taken, heard %+v", i, r)
						default:
						}
					default:
						if r := <-f.done; r.Err != nil {
							t.Errorf("proposal %d: %v", i, r.Err)
						}
					}
				}
			})
		})
	}
}
