package etcd_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"coord/lease"
	_ "coord/lease/etcd"
)

// An Elector over an etcd cluster (any of its members will do): the work
// runs only while this process holds the lease, with the fencing token (the
// key's create revision) to present to the resource it changes. (Not run:
// it needs a server.)
func Example() {
	ctx := context.Background()
	store, err := lease.Open(ctx, "etcd://127.0.0.1:2379,127.0.0.1:22379,127.0.0.1:32379")
	if err != nil {
		log.Fatal(err) // lease.ErrUnavailable if no member answers
	}
	defer store.Close()
	cfg := lease.ScaledConfig(9 * time.Second) // etcd leases count whole seconds
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
