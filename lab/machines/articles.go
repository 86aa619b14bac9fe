package machines

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"
)

// This file re-implements the articles' Part 3 program ("Machines on a
// Network": messages.go, node.go and main.go), bugs included: three nodes
// exchanging messages through buffered Go channels, terms, randomized
// election timeouts of 3 + rand.Intn(3) seconds, heartbeats every second,
// one vote per term (cleared by stepDown on any heartbeat of the same or a
// higher term), and the log-length up-to-date check on an empty log. Two
// things are parameters: whether send blocks (the articles' first version,
// which wedged) or drops on a full inbox (their fix), and the length of
// one of the articles' seconds (Unit), so that a run of a minute of the
// articles' time takes a second here.

// messageKind says what an articlesMessage carries (the articles'
// messages.go).
type messageKind int

const (
	msgVoteRequest messageKind = iota
	msgVoteResponse
	msgHeartbeat
)

type articlesMessage struct {
	kind         messageKind
	term         int64
	from         string
	candidateID  string
	lastLogIndex int64
	lastLogTerm  int64
	voteGranted  bool
}

type role int

const (
	follower role = iota
	candidate
	leader
)

// nodeState is the articles' node.go.
type nodeState struct {
	id          string
	role        role
	currentTerm int64
	votedFor    string
	votes       int
	votesFrom   map[string]bool
	log         []int64 // never written to: the articles' log stays empty
}

// stepDown is the articles' helper, as printed: every path that learns of
// a higher term calls it, and so does every heartbeat of the same term,
// which clears a vote already given in that term.
func stepDown(node *nodeState, newTerm int64) {
	node.role = follower
	node.currentTerm = newTerm
	node.votedFor = ""
	node.votes = 0
	node.votesFrom = make(map[string]bool)
}

// ArticlesConfig configures one run of the articles' program.
type ArticlesConfig struct {
	// Nodes is the cluster size; the articles hardcode 3.
	Nodes int
	// Unit is the length of one of the articles' seconds.
	Unit time.Duration
	// Blocking selects the articles' first transport (a plain channel
	// send) over their fix (select with default).
	Blocking bool
	// CrashAt is when (in the articles' seconds) a node is crashed, by
	// cancelling its context; CrashLeader crashes whoever leads then
	// instead of node 0 (the articles always crashed node 0).
	CrashAt     float64
	CrashLeader bool
	// Seed seeds the election timeouts (the articles used the global
	// source).
	Seed uint64
}

// ArticlesEvent is one line of the articles' log.
type ArticlesEvent struct {
	// At is in the articles' seconds since the start.
	At   float64 `json:"at"`
	Node int     `json:"node"`
	// What: "timeout" (starting an election), "leader" (won), "heartbeat"
	// (a follower heard one), "crash".
	What string `json:"what"`
	Term int64  `json:"term"`
}

// articlesNet is the channel network: one inbox of 10 per node.
type articlesNet struct {
	cfg     ArticlesConfig
	start   time.Time
	inboxes []chan articlesMessage
	emit    func(ArticlesEvent)
	mu      sync.Mutex // serialises emit; the articles printed with fmt
}

func (n *articlesNet) now() float64 { return float64(time.Since(n.start)) / float64(n.cfg.Unit) }

func (n *articlesNet) log(node int, what string, term int64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.emit(ArticlesEvent{At: n.now(), Node: node, What: what, Term: term})
}

// send is the transport: the articles' first version blocks on a full
// inbox; the fix drops the message, as a network drops a packet to a dead
// machine.
func (n *articlesNet) send(to int, msg articlesMessage) {
	if n.cfg.Blocking {
		n.inboxes[to] <- msg
		return
	}
	select {
	case n.inboxes[to] <- msg:
	default:
	}
}

func (n *articlesNet) seconds(s int) time.Duration { return time.Duration(s) * n.cfg.Unit }

// runNode is the articles' event loop, heartbeats sent from its own select
// (their race fix), every state change on this one goroutine.
func (n *articlesNet) runNode(ctx context.Context, id int, rng *rand.Rand) {
	node := &nodeState{id: fmt.Sprint(id), votesFrom: map[string]bool{}}
	inbox := n.inboxes[id]
	electionTimeout := func() time.Duration { return n.seconds(3 + rng.IntN(3)) }
	electionTimer := time.NewTimer(electionTimeout())
	heartbeat := time.NewTicker(n.seconds(1))
	defer heartbeat.Stop()
	sendHeartbeats := func() {
		for peer := range n.inboxes {
			if peer != id {
				n.send(peer, articlesMessage{kind: msgHeartbeat, term: node.currentTerm, from: node.id})
			}
		}
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-heartbeat.C:
			if node.role == leader {
				sendHeartbeats()
			}
		case <-electionTimer.C:
			if node.role != leader {
				node.currentTerm++
				node.role = candidate
				node.votedFor = node.id
				node.votes = 1
				node.votesFrom = map[string]bool{node.id: true}
				n.log(id, "timeout", node.currentTerm)
				for peer := range n.inboxes {
					if peer != id {
						n.send(peer, articlesMessage{kind: msgVoteRequest, term: node.currentTerm, from: node.id,
							candidateID: node.id, lastLogIndex: int64(len(node.log)), lastLogTerm: 0})
					}
				}
			}
			electionTimer.Reset(electionTimeout())
		case msg := <-inbox:
			switch msg.kind {
			case msgHeartbeat:
				if msg.term >= node.currentTerm {
					stepDown(node, msg.term)
					n.log(id, "heartbeat", node.currentTerm)
					electionTimer.Reset(electionTimeout())
				}
			case msgVoteRequest:
				if msg.term > node.currentTerm {
					stepDown(node, msg.term)
				}
				lastLogIndex, lastLogTerm := int64(len(node.log)), int64(0)
				isLogUpToDate := msg.lastLogTerm > lastLogTerm ||
					(msg.lastLogTerm == lastLogTerm && msg.lastLogIndex >= lastLogIndex)
				granted := false
				if msg.term == node.currentTerm && isLogUpToDate && (node.votedFor == "" || node.votedFor == msg.candidateID) {
					node.votedFor = msg.candidateID
					granted = true
					electionTimer.Reset(electionTimeout())
				}
				var from int
				fmt.Sscan(msg.from, &from)
				n.send(from, articlesMessage{kind: msgVoteResponse, term: node.currentTerm, from: node.id, voteGranted: granted})
			case msgVoteResponse:
				if msg.term > node.currentTerm {
					stepDown(node, msg.term)
					continue
				}
				if node.role == candidate && msg.term == node.currentTerm && msg.voteGranted && !node.votesFrom[msg.from] {
					node.votesFrom[msg.from] = true
					node.votes++
					if node.votes > len(n.inboxes)/2 {
						node.role = leader
						n.log(id, "leader", node.currentTerm)
						sendHeartbeats()
					}
				}
			}
		}
	}
}

// RunArticles runs the articles' program until ctx is done, crashing one
// node at CrashAt, and reports every event to emit (from several
// goroutines, serialised). With Blocking set it can wedge: every node
// goroutine blocked on a full inbox; the caller's ctx (or the Go runtime's
// deadlock detector, in a process where nothing else runs) ends it.
func RunArticles(ctx context.Context, cfg ArticlesConfig, emit func(ArticlesEvent)) {
	net := &articlesNet{cfg: cfg, start: time.Now(), emit: emit}
	for range cfg.Nodes {
		net.inboxes = append(net.inboxes, make(chan articlesMessage, 10))
	}
	var leaderMu sync.Mutex
	lastLeader := -1
	tracking := func(e ArticlesEvent) {
		if e.What == "leader" {
			leaderMu.Lock()
			lastLeader = e.Node
			leaderMu.Unlock()
		}
		emit(e)
	}
	net.emit = tracking
	cancels := make([]context.CancelFunc, cfg.Nodes)
	var wg sync.WaitGroup
	for id := range cfg.Nodes {
		nctx, cancel := context.WithCancel(ctx)
		cancels[id] = cancel
		rng := rand.New(rand.NewPCG(cfg.Seed, uint64(id)))
		wg.Add(1)
		go func() {
			defer wg.Done()
			net.runNode(nctx, id, rng)
		}()
	}
	crash := time.NewTimer(time.Duration(cfg.CrashAt * float64(cfg.Unit)))
	select {
	case <-crash.C:
		victim := 0
		leaderMu.Lock()
		if cfg.CrashLeader && lastLeader >= 0 {
			victim = lastLeader
		}
		leaderMu.Unlock()
		net.log(victim, "crash", 0)
		cancels[victim]()
	case <-ctx.Done():
	}
	// The articles' main then waits forever; here it waits for the nodes,
	// which return when ctx ends (unless wedged on a blocking send).
	wg.Wait()
	for _, c := range cancels {
		c()
	}
}
