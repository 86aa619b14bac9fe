package redis_test

import (
	"context"
	"fmt"
	"log"

	"coord/lease"
	_ "coord/lease/redis"
)

// Follow who leads without campaigning: Redis pushes every change (pub/sub,
// and expired-key events where the server allows them), so the watcher
// learns of a new holder within a round trip. (Not run: it needs a server.)
func Example() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	store, err := lease.Open(ctx, "redis://127.0.0.1:6379/0")
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	changes, err := store.Watch(ctx, "scheduler")
	if err != nil {
		log.Fatal(err)
	}
	for rec := range changes {
		if rec.Free() {
			fmt.Println("nobody leads")
			continue
		}
		fmt.Printf("%s leads with token %d until %s\n", rec.Holder, rec.Token, rec.Expiry.Format("15:04:05.000"))
	}
}
