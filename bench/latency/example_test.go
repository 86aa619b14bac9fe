package latency_test

import (
	"fmt"

	"coord/bench/latency"
)

func ExampleRedact() {
	fmt.Println(latency.Redact("redis://:hunter2@127.0.0.1:6379/0"))
	// Output: redis://:xxxxx@127.0.0.1:6379/0
}
