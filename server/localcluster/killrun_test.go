package localcluster

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"coord/client"
)

var killRunDuration = flag.Duration("killrun.duration", 8*time.Second,
	"how long TestKillRunOutcomes kills leaders (CI keeps it short; the figure in docs/BENCHMARKS.md is from 5m)")

// answer is what one forwarded write was answered.
type answer struct {
	key    string
	status int    // 0: no HTTP answer (the connection failed)
	code   string // the API's error code, "" on success
}

// TestKillRunOutcomes kills the leader (kill -9) again and again while
// writers send writes without a session to followers, which forward them.
// Every write is a new key, so at the end a read says whether it applied.
// Every answer must be true: a success applied; an unavailable (or any
// error code but unknown_outcome) did not. Writes answered unknown_outcome,
// and those that got no answer, may have gone either way; they are
// counted.
//
//	go test ./server/localcluster -run TestKillRunOutcomes -killrun.duration 5m -v
func TestKillRunOutcomes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), *killRunDuration+3*time.Minute)
	defer cancel()
	// Insecure: the run counts what forwarding answers about writes sent as
	// plain HTTP requests without sessions; TLS changes none of it.
	c, err := Start(ctx, Config{Nodes: 3, Dir: t.TempDir(), Binary: os.Args[0], SelfServe: true, Insecure: true,
		Args: []string{"--tick", "20ms", "--snapshot-entries", "500"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	leader, err := c.WaitLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var current atomic.Uint64 // the leader as the killer last saw it
	current.Store(leader)
	nodes := map[uint64]Node{}
	for _, n := range c.Nodes() {
		nodes[n.ID] = n
	}

	var (
		mu      sync.Mutex
		answers []answer
		wg      sync.WaitGroup
	)
	stop := make(chan struct{})
	hc := &http.Client{Timeout: 2 * time.Second}
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				// A follower as far as the killer knows: it forwards.
				id := uint64(1 + (w+i)%3)
				if id == current.Load() {
					id = 1 + id%3
				}
				a := put(hc, nodes[id].HTTP, fmt.Sprintf("w%d-%06d", w, i))
				mu.Lock()
				answers = append(answers, a)
				mu.Unlock()
			}
		}()
	}

	kills := 0
	deadline := time.Now().Add(*killRunDuration)
	for time.Now().Before(deadline) {
		lctx, lcancel := context.WithTimeout(ctx, 20*time.Second)
		leader, err := c.WaitLeader(lctx)
		lcancel()
		if err != nil {
			t.Fatalf("no leader: %v", err)
		}
		current.Store(leader)
		time.Sleep(300 * time.Millisecond) // let writes flow to this leader: the load, not a wait for a state
		if err := c.Kill(leader); err != nil {
			t.Fatal(err)
		}
		kills++
		lctx, lcancel = context.WithTimeout(ctx, 20*time.Second)
		next, err := c.WaitLeader(lctx, c.Except(leader)...)
		lcancel()
		if err != nil {
			t.Fatalf("no leader after killing %d: %v", leader, err)
		}
		current.Store(next)
		if err := c.Restart(ctx, leader); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()

	// Settle: a write through the client (which retries) commits in the
	// current leader's term, so everything committed before is applied.
	cl, err := client.New(client.DefaultConfig(c.Endpoints()...))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Put(ctx, "settle", nil); err != nil {
		t.Fatal(err)
	}
	applied := func(key string) bool {
		_, err := cl.Get(ctx, key)
		if err != nil && !errors.Is(err, client.ErrNotFound) {
			t.Fatalf("read %s: %v", key, err)
		}
		return err == nil
	}
	var ok, unknownApplied, unknownNot, noAnswerApplied, noAnswerNot, refused int
	codes := map[string]int{}
	for _, a := range answers {
		did := applied(a.key)
		switch {
		case a.status == 200:
			ok++
			if !did {
				t.Errorf("%s was acknowledged and is not applied", a.key)
			}
		case a.status == 0:
			if did {
				noAnswerApplied++
			} else {
				noAnswerNot++
			}
		case a.code == "unknown_outcome":
			if did {
				unknownApplied++
			} else {
				unknownNot++
			}
		default:
			refused++
			codes[fmt.Sprintf("%d %s", a.status, a.code)]++
			if did {
				t.Errorf("%s was answered %d %s, which says not applied, and it is applied", a.key, a.status, a.code)
			}
		}
	}
	t.Logf("%v of kills (%d leaders killed): %d forwarded writes: %d succeeded; %d unknown_outcome (%d applied, %d not); "+
		"%d without an answer (%d applied, %d not); %d refused, none applied: %v",
		*killRunDuration, kills, len(answers), ok, unknownApplied+unknownNot, unknownApplied, unknownNot,
		noAnswerApplied+noAnswerNot, noAnswerApplied, noAnswerNot, refused, codes)
	if kills == 0 || ok == 0 {
		t.Fatalf("the run proved nothing: %d kills, %d successes", kills, ok)
	}
}

// put sends one write without a session, once, and returns its answer.
func put(hc *http.Client, addr, key string) answer {
	req, err := http.NewRequest("PUT", "http://"+addr+"/v1/kv/"+key, strings.NewReader(key))
	if err != nil {
		return answer{key: key}
	}
	resp, err := hc.Do(req)
	if err != nil {
		return answer{key: key}
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	a := answer{key: key, status: resp.StatusCode}
	if resp.StatusCode != 200 {
		var body struct{ Code string }
		_ = json.Unmarshal(raw, &body)
		a.code = body.Code
	}
	return a
}
