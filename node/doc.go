// Package node runs the raft core: Handler does the work of its Readies,
// step by step and without a goroutine or a clock, and Node is the
// goroutine shell around a Handler that gives it a ticker, an inbox for
// peers' messages and requests from the application.
//
// Handler is the one Ready loop in coord. The server runs it through Node;
// the simulator (coord/sim) and the transcripts (coord/raft/rafttest) drive
// the very same Handler with their simulated clocks, networks and
// crashable storage, so what they check is the code that runs in
// production.
//
// # The Ready contract
//
// For every raft.Ready, the Handler does, in this order and on one
// goroutine:
//
//  0. Transport.Send of what promises nothing the write adds: a leader's
//     requests (appends, heartbeats) when the Ready changes neither term
//     nor vote, so that the leader's own disk write overlaps the network
//     and the followers' writes (dissertation §10.2.1; the core counts the
//     leader's copy towards a quorum only once it is written,
//     Core.Advance); read-index requests and answers and heartbeat
//     answers; a candidate's own vote requests (it steps no answer before
//     its write returns). Then, for a Ready without a snapshot, the
//     committed entries are applied and their proposers answered (they
//     are durable on a quorum already), and a candidate's held proposals
//     are proposed once it leads (Handler.ProposeAtElection);
//  1. Storage.ApplySnapshot (if any), then Storage.Save(HardState,
//     Entries, MustSync), which must be durable when it returns (fsync),
//     unless MustSync is false: a Ready that changes the commit index
//     alone is written without an fsync (a crash may lose it; the leader
//     tells it again), which saves the leader its second fsync per write;
//  2. Transport.Send of the other messages: only now, because a granted
//     vote or an append acknowledgement promises what step 1 made durable
//     (Raft Figure 2: "respond after updating stable storage");
//  3. StateMachine.Restore (snapshot), then StateMachine.Apply for each
//     committed entry not applied in step 0, in log order, and the membership of each committed
//     change recorded as the core worked it out (raft.Ready.ConfChanges);
//     waiting proposals and reads are answered;
//  4. Core.Advance, then log compaction every SnapshotEntries entries (or
//     SnapshotBytes of entry data, if sooner), and, with
//     SnapshotLogPercent (Node's default: 25), no sooner than the entry
//     data applied since the last snapshot is that share of its size,
//     plus up to a quarter drawn per snapshot so that the members do not
//     snapshot together: snapshots then cost the same per write however
//     large the state grows.
//
// A snapshot need not stop the loop for the size of the state: when the
// StateMachine is a SnapshotViewer and the Handler has a Background (Node
// always gives it one), step 4 only takes the state machine's
// point-in-time view at the applied index; the view is encoded, written
// and fsynced on another goroutine (streamed, in chunks, to a
// SnapshotStorage such as raftstore's Disk) while the loop goes on
// replicating and applying, and the log is compacted on the loop once the
// snapshot is durable (snapshot.go). The simulator checks that every such
// snapshot, read back and restored, is exactly the state applied at its
// index.
//
// A test checks, at every Send, that storage already holds the votes and
// entries the messages vouch for, and the term of a leader's appends; the
// simulator checks it at every send of every seed.
//
// # When step 1 fails
//
// A storage write that fails (a full disk, an I/O error) does not stop the
// node. The Handler holds the Ready: none of the messages that wait for
// the write are sent (what step 0 sent, and the entries it applied, were
// already sound without it). Until the write succeeds it takes no messages (they
// are dropped, as by a partition) and no ticks, refuses proposals and
// reads with ErrStorage (wrapping the cause: vfs.IsNoSpace tells a full
// disk), and Node reports the failure in StorageError. On every tick it
// repairs the storage (Repairer) and writes the held Ready again; once that
// works, it carries on with steps 2 to 4 as if the write had been slow. A
// failed snapshot (log compaction) is logged and retried later, with
// back-off.
//
// # Plugging in
//
// A Transport only needs Send, which must never block: *tcp.Transport (the
// coord/transport/tcp package) satisfies it, and so does the in-memory
// MemoryNetwork used in tests. Inbound messages go to Node.Deliver, failed
// sends to Node.ReportUnreachable and Node.ReportSnapshot; none of them
// blocks. The durable storage.raftstore Disk satisfies Storage;
// NewMemoryStorage is the in-memory one.
package node
