package eventlog_test

import (
	"bytes"
	"encoding/json"
	"fmt"

	"coord/lease"
	"coord/lease/eventlog"
)

// A participant reports its election as one JSON line; a reader in another
// process decodes it back into a lease.Event.
func Example() {
	var out bytes.Buffer
	w := eventlog.NewWriter(&out, "worker-1")
	if _, err := w.Write(lease.Event{Event: lease.EventElected, Holder: "worker-1", Token: 42}); err != nil {
		fmt.Println(err)
		return
	}
	var ev lease.Event
	if err := json.Unmarshal(out.Bytes(), &ev); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(ev.Event, ev.Holder, ev.Token, ev.ID)
	// Output: elected worker-1 42 worker-1
}
