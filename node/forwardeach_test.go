package node

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"

	"coord/raft"
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

// Proposals queued with QueueForward on a follower are taken by its loop,
// forwarded to the leader and applied, each heard by its waiter; once the
// loop has ended nothing is queued, and nothing of the proposal is called.
func TestQueueForwardTakesAndEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := startBatchCluster(t, 23, func() Storage { return NewMemoryStorage() }, 4<<20)
		leader := c.waitLeader(0)
		var follower *member
		for id, m := range c.members {
			if id != leader.node.ID() {
				follower = m
				break
			}
		}
		synctest.Wait() // the follower has heard of the leader
		queued := make([]*forwarding, 4)
		for i := range queued {
			queued[i] = &forwarding{data: fmt.Appendf(nil, "q%d=v", i), done: make(chan Result, 1)}
			if !follower.node.QueueForward(queued[i]) {
				t.Fatalf("proposal %d not queued on a running node", i)
			}
		}
		for i, f := range queued {
			if r := <-f.done; r.Err != nil || f.refused != nil {
				t.Errorf("proposal %d: %v (refused: %v)", i, r.Err, f.refused)
			}
		}
		if err := follower.node.Stop(); err != nil {
			t.Fatal(err)
		}
		late := &forwarding{data: []byte("late=v"), done: make(chan Result, 1)}
		if follower.node.QueueForward(late) {
			t.Fatal("a proposal was queued after the loop ended")
		}
		synctest.Wait()
		select {
		case r := <-late.done:
			t.Fatalf("a proposal refused at the queue heard %+v", r)
		default:
		}
		if late.refused != nil {
			t.Fatalf("a proposal refused at the queue was refused by the loop: %v", late.refused)
		}
	})
}

// heldStorage holds its next write of entries, once hold is called, until
// release is closed; entered is closed when that write begins.
type heldStorage struct {
	Storage
	mu      sync.Mutex
	holding bool
	entered chan struct{}
	release chan struct{}
}

func (s *heldStorage) hold() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.holding, s.entered, s.release = true, make(chan struct{}), make(chan struct{})
}

func (s *heldStorage) Save(hs raft.HardState, entries []raft.Entry, sync bool) error {
	s.mu.Lock()
	held := s.holding && len(entries) > 0
	if held {
		s.holding = false
		close(s.entered)
	}
	release := s.release
	s.mu.Unlock()
	if held {
		<-release
	}
	return s.Storage.Save(hs, entries, sync)
}

// A follower writes a Ready beside its forwards only while it forwards:
// held in the write of an entry the leader proposed (it forwarded
// nothing), its loop takes no proposal queued meanwhile, and the leader
// sees none until the write ends; held in the write of an entry it
// forwarded itself, it sends the proposal queued meanwhile at once, and
// the leader applies it before the write ends.
func TestFollowerWritesBesideOnlyWhileForwarding(t *testing.T) {
	for _, busy := range []bool{false, true} {
		t.Run(fmt.Sprintf("forwarding=%v", busy), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c := startBatchCluster(t, 29, func() Storage { return &heldStorage{Storage: NewMemoryStorage()} }, 4<<20)
				leader := c.waitLeader(0)
				var follower *member
				for id, m := range c.members {
					if id != leader.node.ID() {
						follower = m
						break
					}
				}
				synctest.Wait() // the follower has heard of the leader
				store := follower.storage.(*heldStorage)
				store.hold()
				first := &forwarding{data: []byte("first=v"), done: make(chan Result, 1)}
				if busy {
					follower.node.QueueForward(first)
				} else {
					go func() {
						_, err := leader.node.Propose(context.Background(), first.data)
						first.done <- Result{Err: err}
					}()
				}
				<-store.entered
				beside := &forwarding{data: []byte("beside=v"), done: make(chan Result, 1)}
				follower.node.QueueForward(beside)
				synctest.Wait()
				applied := leader.sm.get("beside") == "v"
				close(store.release)
				if applied != busy {
					t.Fatalf("the leader applied the proposal queued during the follower's held write: %v, want %v", applied, busy)
				}
				for _, f := range []*forwarding{first, beside} {
					if r := <-f.done; r.Err != nil || f.refused != nil {
						t.Errorf("%s: %v (refused: %v)", f.data, r.Err, f.refused)
					}
				}
			})
		})
	}
}
