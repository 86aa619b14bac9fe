package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"coord/client"
)

// A client of a three-node cluster (coord cluster up prints the
// addresses). It needs no idea of which node leads.
func Example() {
	c, err := client.New(client.DefaultConfig("127.0.0.1:8001", "127.0.0.1:8002", "127.0.0.1:8003"))
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	rev, err := c.PutIf(ctx, "config", []byte("v1"), 0) // create only
	if errors.Is(err, client.ErrConflict) {
		fmt.Println("someone else created it")
	}
	kv, err := c.Get(ctx, "config") // linearizable
	if err == nil {
		fmt.Println(string(kv.Value), kv.Revision == rev)
	}
	l, err := c.Acquire(ctx, "leader", "me", 5*time.Second)
	if errors.Is(err, client.ErrHeld) {
		fmt.Println("held by someone else")
	} else if err == nil {
		fmt.Println("fencing token", l.Token)
	}
}
