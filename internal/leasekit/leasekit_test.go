package leasekit

import (
	"context"
	"errors"
	"testing"
	"time"

	"coord/internal/assert"
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
		assert.That(errors.Is(err, lease.ErrInvalid), "want ErrInvalid, got %v", err)
	}
	assert.That(CheckToken("p", "n", "h", 1, time.Second) == nil, "valid arguments rejected")
}

func TestUnavailableMatchesBoth(t *testing.T) {
	err := Unavailable("lease/x", "renew", "n", context.DeadlineExceeded)
	assert.That(errors.Is(err, lease.ErrUnavailable), "not ErrUnavailable: %v", err)
	assert.That(errors.Is(err, context.DeadlineExceeded), "cause lost: %v", err)
	assert.Equal(Unavailable("lease/x", "get", "n", err), err, "rewrapped error")
}

func TestBoundKeepsEarlierDeadline(t *testing.T) {
	parent, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	want, _ := parent.Deadline()
	ctx, cancel2 := Bound(parent, time.Hour)
	defer cancel2()
	got, ok := ctx.Deadline()
	assert.That(ok && got.Equal(want), "deadline %v, want %v", got, want)

	ctx3, cancel3 := Bound(context.Background(), 0)
	defer cancel3()
	_, ok = ctx3.Deadline()
	assert.That(ok, "no deadline on an unbounded context")
}

func TestFeedCoalescesToLatest(t *testing.T) {
	f := NewFeed()
	for i := uint64(1); i <= 5; i++ {
		f.Send(lease.Record{Name: "n", Holder: "h", Token: i}, nil)
	}
	got := <-f.C()
	assert.Equal(got.Token, uint64(5), "token after coalescing")

	f.Send(lease.Record{Name: "n", Holder: "h", Token: 5}, nil)
	select {
	case r := <-f.C():
		t.Fatalf("unchanged record sent again: %+v", r)
	default:
	}
	f.Send(lease.Record{Name: "n", Holder: "h", Token: 5}, int64(7))
	assert.Equal((<-f.C()).Token, uint64(5), "token after a version change")
	f.Close()
	_, ok := <-f.C()
	assert.That(!ok, "channel not closed")
}
