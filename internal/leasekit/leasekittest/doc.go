// Package leasekittest holds the test helpers that coord's networked lease
// backends share beside the conformance suite (lease/leasetest): finding
// their test server (ServerURL), unique lease names (Name), and checks of
// faults between a client and its store: a watch across a cut connection
// (WatchAcrossCut) and prompt lease.ErrUnavailable from a store that
// cannot be reached (Unavailable).
package leasekittest
