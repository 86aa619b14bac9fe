// Package node is the goroutine shell around the raft core: one goroutine
// owns a raft.Core and drives it with a ticker, messages from a Transport,
// and requests from the application; it persists to a Storage, sends
// through the Transport, and applies committed entries to the application's
// StateMachine.
//
// # The Ready contract
//
// For every raft.Ready the loop does, in this order and on one goroutine:
//
//  1. Storage.ApplySnapshot (if any), then Storage.Save(HardState,
//     Entries), which must be durable when it returns (fsync);
//  2. Transport.Send(Messages): only now, because a granted vote or an
//     append acknowledgement promises what step 1 made durable (Raft
//     Figure 2: "respond after updating stable storage");
//  3. StateMachine.Restore (snapshot), then StateMachine.Apply for each
//     committed entry, in log order; waiting proposals and reads are
//     answered;
//  4. Core.Advance.
//
// A test checks, at every Send, that storage already holds the votes and
// entries the messages vouch for.
//
// # When step 1 fails
//
// A storage write that fails (a full disk, an I/O error) does not stop the
// node. It holds the Ready: none of its messages are sent, none of its
// entries applied. Until the write succeeds it takes no messages (they are
// dropped, as by a partition) and no ticks, refuses proposals and reads
// with ErrStorage (wrapping the cause: vfs.IsNoSpace tells a full disk),
// and reports the failure in StorageError. On every tick it repairs the
// storage (Repairer) and writes the held Ready again; once that works, it
// carries on with steps 2 to 4 as if the write had been slow. A failed
// snapshot (log compaction) is logged and retried later, with back-off.
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
