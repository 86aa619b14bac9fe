// Package leasekittest holds the test helpers that coord's networked lease
// backends share beside the conformance suite (lease/leasetest, whose
// faults.go has the fault checks): finding their test server (ServerURL)
// and lease names unique to a test (Name).
package leasekittest
