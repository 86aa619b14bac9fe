package machines

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"
)

func TestZZDeadlockChild(t *testing.T) {
	if os.Getenv("ZZ") != "1" {
		t.Skip()
	}
	RunArticles(context.Background(), ArticlesConfig{Nodes: 3, Unit: 25 * time.Millisecond, Blocking: true, CrashAt: 10, Seed: 3}, func(e ArticlesEvent) { fmt.Println(e) })
}
