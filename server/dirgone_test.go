package server

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"coord/storage/raftstore"
)

// TestFollowerWhoseDataDirectoryIsRemovedStopsAcknowledging: a follower's
// data directory is removed while it runs. Its open log segment would take
// writes, unlinked, that no restart could find; within about a second of
// writes (raftstore.Options.CheckDirEvery) it reports its storage failed,
// naming the directory, and the other two go on committing.
func TestFollowerWhoseDataDirectoryIsRemovedStopsAcknowledging(t *testing.T) {
	c := newTestCluster(t, 3)
	leader := c.waitLeader()
	var f *testNode
	for id, n := range c.nodes {
		if id != leader {
			f = n
			break
		}
	}
	propose(t, c, Command{Op: OpPut, Key: "before", Value: []byte("1")})
	if err := os.RemoveAll(f.dir); err != nil {
		t.Fatal(err)
	}
	// Write until the follower notices: CheckDirEvery is a second, so a
	// few seconds of writes at most; the bound is only against a hang.
	deadline := time.Now().Add(60 * time.Second)
	for i := 0; ; i++ {
		propose(t, c, Command{Op: OpPut, Key: fmt.Sprintf("k%d", i%10), Value: []byte(fmt.Sprint(i))})
		if st := f.Status(); st.Storage != nil {
			if !strings.Contains(st.Storage.Error, "data directory") {
				t.Fatalf("storage error %q does not name the data directory", st.Storage.Error)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("follower %d did not report its storage failed after %d writes", f.id, i+1)
		}
	}
	if err := f.shell.StorageError(); !errors.Is(err, raftstore.ErrLost) {
		t.Errorf("the follower's storage error %v does not wrap raftstore.ErrLost", err)
	}
	// The other two still commit.
	res := propose(t, c, Command{Op: OpPut, Key: "after", Value: []byte("2")})
	if res.Revision == 0 {
		t.Errorf("a write after the follower's failure: %+v", res)
	}
}
