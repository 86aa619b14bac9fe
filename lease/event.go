package lease

import "time"

// Event names in the JSON lines of `coord elect --json` and of the articles'
// programs (`coord articles ... --json`).
const (
	EventElected  = "elected"  // this participant acquired the lease
	EventRenewed  = "renewed"  // this participant renewed it
	EventLost     = "lost"     // this participant lost it without handing it back
	EventReleased = "released" // this participant handed it back
	EventLeader   = "leader"   // this participant saw another holder
)

// Event is one line of a participant's machine-readable output: what
// happened, to whom, and when, on two clocks. Programs that measure
// failover (coord bench, the lab) read these from several processes and
// compare MonoNS, which all processes of one machine share. The writer,
// which stamps the clocks, is lease/eventlog.
type Event struct {
	// Time is the wall-clock time of the event (RFC 3339 with nanoseconds
	// in JSON).
	Time time.Time `json:"time"`
	// MonoNS is CLOCK_MONOTONIC in nanoseconds at the event: immune to
	// wall-clock steps, comparable between processes of one boot; 0 where
	// the platform has no such clock (eventlog.MonotonicNow).
	MonoNS int64 `json:"mono_ns"`
	// Event is one of the Event* names (the articles' programs add a few).
	Event string `json:"event"`
	// Holder is the lease holder the event is about: this participant for
	// elected, renewed, lost and released; the other one for leader.
	Holder string `json:"holder"`
	// Token is the holder's fencing token; 0 (omitted) where there is none,
	// as in the articles' programs.
	Token uint64 `json:"token,omitempty"`
	// ID is the identity of the participant that wrote the event.
	ID string `json:"id"`
	// PID is the process id of the participant that wrote the event.
	PID int `json:"pid"`
	// Expiry is when the holder's lease expires, on the writer's clock,
	// where known.
	Expiry time.Time `json:"expiry,omitzero"`
	// Detail qualifies the event ("takeover", "acquired"), where useful.
	Detail string `json:"detail,omitempty"`
	// Error says why, for lost.
	Error string `json:"error,omitempty"`
}
