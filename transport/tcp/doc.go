// Package tcp is coord's Raft transport over TCP.
//
// Every pair of nodes shares one connection, dialed by the node with the
// lower ID and redialed with jittered exponential backoff when it breaks;
// messages flow both ways on it. A send never blocks the node: each peer has
// a bounded queue, drained by one writer goroutine, and a message to a peer
// that is unknown, unconnected or too slow to keep its queue from filling is
// dropped (and reported, so that the leader probes that peer instead of
// pipelining to it). This is the articles' blocking-send lesson applied to a
// real network: a send to a dead machine must behave like a packet to a dead
// machine.
//
// When nothing is queued for a peer and no write to it is in progress, Send
// writes the peer's messages to its socket itself (Config.DirectWriteMaxBytes),
// so that a leader's appends leave before its own fsync starts rather than
// whenever the writer goroutine is next scheduled. That write never waits
// either: the socket is written with MSG_DONTWAIT (below TLS, if any), and
// what the kernel's buffer does not take at once is left to the writer
// goroutine, which writes it before anything else; while it is there, and
// while anything is queued, messages take the queue. A peer's messages
// keep their order across both paths.
//
// A connection closed from the peer's end (an EOF or a reset, not a
// timeout or this end's own close) is reported through Config.PeerClosed:
// on a host that lives, the kernel closes a process's connections when the
// process dies, and the node takes the close as a hint that the peer, if
// it is the leader, is gone (raft.Core.ReportPeerGone).
//
// # Wire format
//
// A connection is a stream of frames:
//
//	length   uint32, big endian: bytes of type and payload (at most MaxFrameBytes)
//	type     1 byte
//	payload  length-1 bytes
//	crc      uint32, big endian: CRC-32C (Castagnoli) of type and payload
//
// Frame types:
//
//	1 hello           "coordtp", version, from ID, to ID, meta    (uvarints; meta length-prefixed)
//	2 hello ack       the same, from the acceptor
//	3 message         one raft.Message without snapshot data
//	4 snapshot begin  total data size, then a MsgSnapshotRequest without its data
//	5 snapshot chunk  a last-chunk flag byte (0 or 1), then up to SnapshotChunkBytes of data
//
// A message is encoded as its type byte, then From, To, Term, LogIndex,
// LogTerm, Commit as uvarints, Reject as a byte, HintIndex, HintTerm,
// ReadRound as uvarints, Transfer as a byte, the entry count and each entry
// (term, index, type byte, length-prefixed data), then the snapshot
// metadata (index, term, and the voter, learner and outgoing voter lists,
// each a count and uvarint IDs).
//
// # Mutual TLS
//
// With Config.TLS set (coord server's default), every connection is TLS
// 1.3 with certificates on both ends, made before any frame: the hello
// and everything after it travel inside. A node's certificate names its
// cluster and node ID (internal/pki: a coord://CLUSTER/node/ID URI). The
// acceptor refuses a dialer whose certificate does not verify, names no
// node of its cluster, or names another node than the hello claims; the
// dialer refuses an acceptor whose certificate names another node than
// the one it dialed. Each refusal closes the connection and is logged
// with its reason, before anything the other end sent reaches the node.
// Without TLS (--insecure), a hello is taken at its word: anyone who can
// reach the port can speak as any node.
//
// The dialer sends a hello naming itself and the node it meant to reach;
// the acceptor refuses (closes, and logs why) a hello that is malformed, of
// another protocol version, addressed to another node, or from a node that
// is not a current peer (unknown, or removed). A frame that fails its
// checksum or does not decode closes the connection, with the reason
// logged; a message whose sender or recipient does not match the
// connection's is dropped and logged. Snapshot data travels in chunks with
// the peer's other messages between them, so heartbeats are not stuck
// behind a large snapshot.
//
// # Snapshots of any size
//
// Neither end holds a snapshot whole. The sender reads the data from the
// snapshot's Source (the leader's snapshot file) one chunk at a time; the
// file's reader checks the file's checksum with its last bytes, so a
// damaged file ends the stream before the last chunk and the peer never
// takes it. The receiver, with Config.SpoolSnapshot (the server spools to
// its data directory: raftstore.Disk.ReceiveSnapshot), writes each chunk
// to the spool as it arrives and delivers the message with Snapshot.Source
// once the last chunk is in and the spool committed (fsynced). Every chunk
// frame carries its CRC-32C and the begin frame the exact size, so a
// stream that breaks off, overruns or falls short of its size, or carries
// a bad frame, closes the connection and aborts the spool, which removes
// its file: nothing of it is delivered. A spool that fails (a full disk, a
// snapshot the node has already passed) is logged and the rest of the
// stream is read and dropped, keeping the connection. MaxSnapshotBytes
// bounds what a receiver accepts (0, the default: no bound but the disk);
// without a spool, the data is gathered in memory and bounded by
// MaxSnapshotMemoryBytes (1 GiB) as before.
//
// The snapshot frames are those of protocol version 1, unchanged, but the
// protocol is version 2: it added message types 12 to 14 (a follower's read
// index request and its answer, and forwarded proposals, whose commands a
// version-1 node would refuse to apply). A node refuses a hello of another
// version, so nodes of the two versions never form a cluster.
package tcp
