package node_test

import (
	"testing"

	"coord/node"
	"coord/storage/storagetest"
)

// TestMemoryStorageConformance runs the storage conformance suite on the
// in-memory Storage that tests and the simulator use, so that it behaves
// like the durable one in everything but durability.
func TestMemoryStorageConformance(t *testing.T) {
	storagetest.Run(t, func(*testing.T) storagetest.Storage { return node.NewMemoryStorage() })
}

// TestMemoryStorageCrashConformance: memory is as durable as the process,
// so a crash of the storage alone loses nothing, which the contract allows.
func TestMemoryStorageCrashConformance(t *testing.T) {
	storagetest.RunCrash(t, func(*testing.T) storagetest.Crashable {
		s := node.NewMemoryStorage()
		return storagetest.Crashable{Storage: s, Crash: func() storagetest.Storage { return s }}
	})
}
