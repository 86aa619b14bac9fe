package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"coord/lease"
	_ "coord/lease/postgres"
)

// Acquire and release a lease directly, with advisory locks on, so that a
// holder whose database session dies is replaced at once instead of at
// expiry. The token goes to the resource the holder changes, which rejects
// writes with a lower one. (Not run: it needs a server.)
func Example() {
	ctx := context.Background()
	store, err := lease.Open(ctx, "postgres://app@127.0.0.1:5432/app?sslmode=disable&advisory=true")
	if err != nil {
		log.Fatal(err) // lease.ErrUnavailable if the server does not answer
	}
	defer store.Close()
	rec, err := store.Acquire(ctx, "nightly-report", "host-a", 30*time.Second)
	if errors.Is(err, lease.ErrHeld) {
		fmt.Println("already running on", rec.Holder)
		return
	}
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("running with fencing token", rec.Token)
	if err := store.Release(ctx, "nightly-report", "host-a", rec.Token); err != nil {
		log.Print(err) // lease.ErrLost: it expired and someone else took it
	}
}
