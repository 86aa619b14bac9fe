package api

// Role is a node's role in the cluster, as /v1/status reports it.
type Role string

// The roles.
const (
	RoleLeader    Role = "leader"
	RoleFollower  Role = "follower"
	RoleCandidate Role = "candidate" // pre-candidates included
	RoleLearner   Role = "learner"
)

// Member is one node of the cluster as a node knows it.
type Member struct {
	ID uint64 `json:"id"`
	// Peer is the address of its Raft transport; HTTP the address of its
	// API, "" while unknown (a node learns it when the peer connects).
	Peer string `json:"peer"`
	HTTP string `json:"http,omitempty"`
	// Voter is false for learners.
	Voter bool `json:"voter"`
}

// NodeStatus is a node's view of the cluster: the answer to
// GET /v1/status.
type NodeStatus struct {
	ID      uint64   `json:"id"`
	Role    Role     `json:"role"`
	Term    uint64   `json:"term"`
	Leader  uint64   `json:"leader"`
	Commit  uint64   `json:"commit"`
	Applied uint64   `json:"applied"`
	Members []Member `json:"members"`
	// ClusterID is the cluster's ID in 16 hex digits, from the data
	// directory's identity; empty if not known.
	ClusterID string `json:"cluster_id,omitempty"`
	// Storage is set while this node's storage fails: it takes no writes,
	// and neither votes nor acknowledges appends, until a retry succeeds.
	Storage *StorageStatus `json:"storage,omitempty"`
	// LogLost is set while this node's log ends below what a leader says
	// it acknowledged: its disk lost synced entries.
	LogLost *LogLostStatus `json:"log_lost,omitempty"`
}

// StorageStatus says why a node's storage is failing.
type StorageStatus struct {
	Error    string `json:"error"`
	DiskFull bool   `json:"disk_full"`
}

// LogLostStatus describes a log that lost acknowledged entries: a leader
// says Commit is committed, and this node's log ends at LastIndex.
type LogLostStatus struct {
	Leader    uint64 `json:"leader"`
	Commit    uint64 `json:"commit"`
	LastIndex uint64 `json:"last_index"`
}

// MemberRequest is the JSON body of POST /v1/members: the new node's ID
// and the HOST:PORT its Raft transport listens on.
type MemberRequest struct {
	ID   uint64 `json:"id"`
	Peer string `json:"peer"`
}

// MembersResponse is the answer to GET, POST and DELETE of /v1/members.
type MembersResponse struct {
	Members []Member `json:"members"`
}
