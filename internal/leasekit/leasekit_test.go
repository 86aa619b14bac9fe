package leasekit

import (
	"context"
	"errors"
	"testing"
	"time"

	"coord/lease"
)

func TestChecksRejectBadArguments(t *testing.T) {
	for _, err := range []error{
		CheckName("p", ""),
		CheckAcquire("p", "n", "", time.Second),
		CheckAcquire("p", "n", "h", 0),
		CheckAcquire("p", "n", "h", -time.Second),
		CheckToken("p", "n", "h", 0, time.Second),
	} {
		if !errors.Is(err, lease.ErrInvalid) {
			t.Fatalf("want ErrInvalid, got %v", err)
		}
	}
	if CheckToken("p", "n", "h", 1, time.Second) != nil {
		t.Fatal("valid arguments rejected")
	}
}

func TestUnavailableMatchesBoth(t *testing.T) {
	err := Unavailable("lease/x", "renew", "n", context.DeadlineExceeded)
	if !errors.Is(err, lease.ErrUnavailable) {
		t.Fatalf("not ErrUnavailable: %v", err)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("cause lost: %v", err)
	}
	if got := Unavailable("lease/x", "get", "n", err); got != err {
		t.Fatalf("rewrapped error: got %v, want %v", got, err)
	}
}

func TestBoundKeepsEarlierDeadline(t *testing.T) {
	parent, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	want, _ := parent.Deadline()
	ctx, cancel2 := Bound(parent, time.Hour)
	defer cancel2()
	got, ok := ctx.Deadline()
	if !(ok && got.Equal(want)) {
		t.Fatalf("deadline %v, want %v", got, want)
	}

	ctx3, cancel3 := Bound(context.Background(), 0)
	defer cancel3()
	_, ok = ctx3.Deadline()
	if !ok {
		t.Fatal("no deadline on an unbounded context")
	}
}

func TestFeedCoalescesToLatest(t *testing.T) {
	f := NewFeed()
	for i := uint64(1); i <= 5; i++ {
		f.Send(lease.Record{Name: "n", Holder: "h", Token: i}, nil)
	}
	got := <-f.C()
	if got.Token != 5 {
		t.Fatalf("token after coalescing: got %d, want 5", got.Token)
	}

	f.Send(lease.Record{Name: "n", Holder: "h", Token: 5}, nil)
	select {
	case r := <-f.C():
		t.Fatalf("unchanged record sent again: %+v", r)
	default:
	}
	f.Send(lease.Record{Name: "n", Holder: "h", Token: 5}, int64(7))
	if tok := (<-f.C()).Token; tok != 5 {
		t.Fatalf("token after a version change: got %d, want 5", tok)
	}
	f.Close()
	_, ok := <-f.C()
	if ok {
		t.Fatal("channel not closed")
	}
}
