package sqlite_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"coord/lease"
	_ "coord/lease/sqlite"
)

// Two processes (here, two Backends) share a database file: the second
// cannot acquire while the first holds the lease, and takes it over with
// a greater fencing token once it is released.
func Example() {
	dir, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(dir)
	url := "sqlite://" + filepath.Join(dir, "leases.db")
	ctx := context.Background()

	a, _ := lease.Open(ctx, url)
	defer a.Close()
	b, _ := lease.Open(ctx, url)
	defer b.Close()

	first, _ := a.Acquire(ctx, "scheduler", "host-a", 10*time.Second)
	fmt.Println("host-a holds a token:", first.Token > 0)
	held, err := b.Acquire(ctx, "scheduler", "host-b", 10*time.Second)
	fmt.Println("host-b:", err != nil, "held by", held.Holder)
	_ = a.Release(ctx, "scheduler", "host-a", first.Token)
	second, _ := b.Acquire(ctx, "scheduler", "host-b", 10*time.Second)
	fmt.Println("host-b's token is greater:", second.Token > first.Token)
	// Output:
	// host-a holds a token: true
	// host-b: true held by host-a
	// host-b's token is greater: true
}
