// Package leasekittest holds the test helpers that coord's networked lease
// backends share: finding their test server (ServerURL), a holder running
// in a real OS process that a test can kill (StartHolder, HolderMain), and
// checks of the lease.Backend contract that lease/leasetest does not make
// (Run), such as concurrent acquires from separate connections and Watch
// waking on expiry.
package leasekittest
