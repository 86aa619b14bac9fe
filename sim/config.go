package sim

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// ErrInvalidConfig wraps every Config.Validate and ParseFaults failure.
var ErrInvalidConfig = errors.New("sim: invalid config")

// Fault is one kind of thing the simulated world does wrong.
type Fault string

// The faults a run can inject.
const (
	FaultLoss       Fault = "loss"       // drop 5% of messages
	FaultDelay      Fault = "delay"      // hold 2% of messages for up to 20 ticks
	FaultReorder    Fault = "reorder"    // jitter delivery by up to 2 ticks
	FaultDuplicate  Fault = "duplicate"  // deliver 2% of messages twice
	FaultPartition  Fault = "partition"  // symmetric splits and one-way link cuts
	FaultCrash      Fault = "crash"      // crash nodes' machines (silence) and restart them from storage
	FaultMembership Fault = "membership" // add learners, promote them, remove voters
	// The disk faults act only with Config.Disk.
	FaultDiskFull Fault = "diskfull" // a node's disk is full for a while: writes fail with ENOSPC
	FaultLostDir  Fault = "lostdir"  // a node's log, snapshot and vote files are deleted: its restart must be refused
	// FaultKill kills a node's process on a host that lives: its peers
	// see its connections close, a network delay later, and take that as
	// a hint (raft.Core.ReportPeerGone); it restarts from storage.
	FaultKill Fault = "kill"
	// FaultCut resets the connection between two live nodes: the messages
	// in flight on it are lost and both ends see it close, a false hint.
	FaultCut Fault = "cut"
)

// AllFaults lists every fault, in a fixed order.
var AllFaults = []Fault{FaultLoss, FaultDelay, FaultReorder, FaultDuplicate, FaultPartition, FaultCrash, FaultMembership,
	FaultDiskFull, FaultLostDir, FaultKill, FaultCut}

// Faults is a set of faults.
type Faults []Fault

// Has reports whether f is in the set.
func (fs Faults) Has(f Fault) bool { return slices.Contains(fs, f) }

// String lists the faults comma-separated ("none" if empty), the form
// ParseFaults reads.
func (fs Faults) String() string {
	if len(fs) == 0 {
		return "none"
	}
	if len(fs) == len(AllFaults) {
		return "all"
	}
	return fs.Names()
}

// ParseFaults reads "all", "none" or a comma-separated list of fault names.
func ParseFaults(s string) (Faults, error) {
	switch strings.TrimSpace(s) {
	case "all":
		return slices.Clone(AllFaults), nil
	case "none", "":
		return nil, nil
	}
	var fs Faults
	for _, name := range strings.Split(s, ",") {
		f := Fault(strings.TrimSpace(name))
		if !slices.Contains(AllFaults, f) {
			return nil, fmt.Errorf("%w: unknown fault %q (want all, none, or a list of %v)", ErrInvalidConfig, name, Faults(AllFaults).Names())
		}
		if !fs.Has(f) {
			fs = append(fs, f)
		}
	}
	// Keep the canonical order, so that String is stable.
	slices.SortFunc(fs, func(a, b Fault) int { return slices.Index(AllFaults, a) - slices.Index(AllFaults, b) })
	return fs, nil
}

// Names lists the faults comma-separated, without String's "all" and
// "none" shorthands.
func (fs Faults) Names() string {
	parts := make([]string, len(fs))
	for i, f := range fs {
		parts[i] = string(f)
	}
	return strings.Join(parts, ",")
}

// Config describes one simulated run. Durations are simulated time.
type Config struct {
	// Seed drives every random choice of the run.
	Seed uint64
	// Nodes is the number of voters the cluster starts with.
	Nodes int
	// Faults are injected during the chaos phase.
	Faults Faults
	// Chaos is how long faults are injected before they stop.
	Chaos time.Duration
	// LivenessBound is how long after the faults stop a leader has to
	// commit a new write, and then every member to catch up.
	LivenessBound time.Duration
	// Tick is the simulated length of one raft tick.
	Tick time.Duration
	// ElectionTicks and HeartbeatTicks configure the raft core.
	ElectionTicks  int
	HeartbeatTicks int
	// PreVote and CheckQuorum configure the raft core.
	PreVote     bool
	CheckQuorum bool
	// Hints makes nodes take a closed connection as a hint that the peer
	// died (raft.Core.ReportPeerGone), as coord server does; without it
	// the closes of kills and cuts are ignored, and a kill is as silent
	// as a machine crash.
	Hints bool
	// LatencyMin and LatencyMax bound a message's normal delivery delay.
	LatencyMin, LatencyMax time.Duration
	// WriteInterval and ReadInterval are the mean times between client
	// writes and reads.
	WriteInterval, ReadInterval time.Duration
	// FaultInterval is the mean time between injected faults.
	FaultInterval time.Duration
	// SnapshotEntries is how many applied entries a node keeps before it
	// snapshots and compacts its log.
	SnapshotEntries uint64
	// AlignTicks makes every node tick at the same instants, as timers
	// started by one broadcast do; otherwise each node ticks with its own
	// random phase.
	AlignTicks bool
	// Disk puts each node's log on the durable storage (storage/raftstore:
	// the write-ahead log and snapshot files) over a crashable in-memory
	// file system: a crash keeps only what was synced (and maybe a torn
	// part of the rest), and may strike in the middle of a write. Without
	// it, storage is raft.MemoryStorage, where every completed write is
	// durable, and the disk faults (diskfull, lostdir) do nothing.
	Disk bool

	// viewsFollowState breaks the machines' snapshot views on purpose
	// (they write the state when written, not when taken), so that a test
	// can check that the checker catches it.
	viewsFollowState bool
}

// DefaultConfig returns coord's simulation settings: 5 nodes, every fault,
// 3 s of chaos, 10 ms ticks with raft's default timeouts.
func DefaultConfig() Config {
	return Config{
		Nodes:           5,
		Faults:          slices.Clone(AllFaults),
		Chaos:           3 * time.Second,
		LivenessBound:   5 * time.Second,
		Tick:            10 * time.Millisecond,
		ElectionTicks:   10,
		HeartbeatTicks:  1,
		PreVote:         true,
		CheckQuorum:     true,
		Hints:           true,
		LatencyMin:      200 * time.Microsecond,
		LatencyMax:      2 * time.Millisecond,
		WriteInterval:   15 * time.Millisecond,
		ReadInterval:    40 * time.Millisecond,
		FaultInterval:   250 * time.Millisecond,
		SnapshotEntries: 24,
	}
}

// Validate reports the first field out of range, naming it.
func (c Config) Validate() error {
	switch {
	case c.Nodes < 1 || c.Nodes > 9:
		return fmt.Errorf("%w: Nodes %d must be between 1 and 9", ErrInvalidConfig, c.Nodes)
	case c.Chaos < 0:
		return fmt.Errorf("%w: Chaos %v must not be negative", ErrInvalidConfig, c.Chaos)
	case c.LivenessBound <= 0:
		return fmt.Errorf("%w: LivenessBound %v must be positive", ErrInvalidConfig, c.LivenessBound)
	case c.Tick <= 0:
		return fmt.Errorf("%w: Tick %v must be positive", ErrInvalidConfig, c.Tick)
	case c.HeartbeatTicks <= 0 || c.ElectionTicks <= c.HeartbeatTicks:
		return fmt.Errorf("%w: ElectionTicks %d must exceed HeartbeatTicks %d > 0", ErrInvalidConfig, c.ElectionTicks, c.HeartbeatTicks)
	case c.LatencyMin < 0 || c.LatencyMax < c.LatencyMin:
		return fmt.Errorf("%w: latency [%v, %v] is not a range", ErrInvalidConfig, c.LatencyMin, c.LatencyMax)
	case c.WriteInterval <= 0 || c.ReadInterval <= 0 || c.FaultInterval <= 0:
		return fmt.Errorf("%w: WriteInterval, ReadInterval and FaultInterval must be positive", ErrInvalidConfig)
	case c.SnapshotEntries == 0:
		return fmt.Errorf("%w: SnapshotEntries must be positive", ErrInvalidConfig)
	}
	return nil
}

// sweepConfig is the configuration of the test sweep's run of seed (and of
// TestSeed's): every fault, 3 or 5 nodes by the seed, a short chaos phase
// so that thousands of seeds fit in the CI budget.
func sweepConfig(seed uint64, disk bool) Config {
	cfg := DefaultConfig()
	cfg.Seed = seed
	cfg.Nodes = []int{3, 5}[seed%2]
	cfg.Chaos = 1500 * time.Millisecond
	cfg.Disk = disk
	return cfg
}

// TestReplayCommand returns the go test command that replays this run if it
// is one of the test sweep's (TestSeed uses the sweep's configuration), and
// "" if it is not: TestSeed would replay another run.
func (c Config) TestReplayCommand() string {
	if c.ReplayCommand() != sweepConfig(c.Seed, c.Disk).ReplayCommand() {
		return ""
	}
	cmd := fmt.Sprintf("go test ./sim -run 'TestSeed$' -seed %d", c.Seed)
	if c.Disk {
		cmd += " -disk"
	}
	return cmd + " -simtrace"
}

// ReplayCommand returns the command line that replays this run.
func (c Config) ReplayCommand() string {
	d := DefaultConfig()
	cmd := fmt.Sprintf("go run ./cmd/coord sim --seed %d --nodes %d --faults %s", c.Seed, c.Nodes, c.Faults)
	if c.Chaos != d.Chaos {
		cmd += fmt.Sprintf(" --chaos %v", c.Chaos)
	}
	if !c.PreVote {
		cmd += " --pre-vote=false"
	}
	if !c.CheckQuorum {
		cmd += " --check-quorum=false"
	}
	if !c.Hints {
		cmd += " --hints=false"
	}
	if c.Disk {
		cmd += " --disk"
	}
	return cmd
}
