package etcd_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"coord/lease"
	_ "coord/lease/etcd"
)

// An Elector over a etcd store: the work runs only while this process
// holds the lease, with the fencing token to present to the resource it
// changes. (Not run: it needs a server.)
func Example() {
	ctx := context.Background()
	store, err := lease.Open(ctx, "etcd://127.0.0.1:2379,127.0.0.1:22379,127.0.0.1:32379")
	if err != nil {
		log.Fatal(err) // lease.ErrUnavailable if the server does not answer
	}
	defer store.Close()
	cfg := lease.ScaledConfig(9 * time.Second)
	cfg.Name, cfg.Holder = "scheduler", "host-a"
	cfg.Callbacks.OnElected = func(ctx context.Context, token uint64) {
		fmt.Println("leading with token", token)
		<-ctx.Done() // cancelled before anyone else can acquire the lease
	}
	e, err := lease.NewElector(store, cfg)
	if err != nil {
		log.Fatal(err)
	}
	_ = e.Run(ctx)
}
