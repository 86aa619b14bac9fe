package zookeeper_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"coord/lease"
	_ "coord/lease/zookeeper"
)

// An Elector over a ZooKeeper ensemble (any of its servers will do), with
// its leases under the chroot /coord, which must exist: the work runs only
// while this process holds the lease, with the fencing token (the lease
// node's czxid) to present to the resource it changes. (Not run: it needs
// a server.)
func Example() {
	ctx := context.Background()
	store, err := lease.Open(ctx, "zk://127.0.0.1:2181,127.0.0.1:2182,127.0.0.1:2183/coord")
	if err != nil {
		log.Fatal(err) // lease.ErrUnavailable if no server answers, ErrInvalid if /coord is missing
	}
	defer store.Close()                        // closes the sessions: a lease still held is freed at once
	cfg := lease.ScaledConfig(9 * time.Second) // the session timeout of each tenure
	cfg.Name, cfg.Holder = "scheduler", "host-a"
	cfg.Callbacks.OnElected = func(ctx context.Context, token uint64) {
		fmt.Println("leading with token", token)
		<-ctx.Done() // cancelled before the session can expire on the server
	}
	e, err := lease.NewElector(store, cfg)
	if err != nil {
		log.Fatal(err)
	}
	_ = e.Run(ctx)
}
