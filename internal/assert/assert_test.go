package assert_test

import (
	"errors"
	"strings"
	"testing"

	"coord/internal/assert"
)

// recovered runs f and returns the Failure it panicked with, if any.
func recovered(t *testing.T, f func()) (failure assert.Failure, panicked bool) {
	t.Helper()
	defer func() {
		r := recover()
		if r == nil {
			return
		}
		fl, ok := r.(assert.Failure)
		if !ok {
			t.Fatalf("panicked with %T %v, want assert.Failure", r, r)
		}
		failure, panicked = fl, true
	}()
	f()
	return assert.Failure{}, false
}

func TestThat(t *testing.T) {
	if _, p := recovered(t, func() { assert.That(1 <= 2, "never") }); p {
		t.Fatal("That panicked on a true condition")
	}
	f, p := recovered(t, func() { assert.That(7 <= 5, "commit %d > last index %d", 7, 5) })
	if !p {
		t.Fatal("That did not panic on a false condition")
	}
	if f.Message != "commit 7 > last index 5" {
		t.Fatalf("message = %q", f.Message)
	}
	if !strings.HasPrefix(f.Error(), "assertion failed: ") {
		t.Fatalf("Error() = %q", f.Error())
	}
}

func TestEqual(t *testing.T) {
	if _, p := recovered(t, func() { assert.Equal(3, 3, "term") }); p {
		t.Fatal("Equal panicked on equal values")
	}
	f, p := recovered(t, func() { assert.Equal(uint64(4), 9, "applied index") })
	if !p {
		t.Fatal("Equal did not panic on different values")
	}
	if f.Message != "applied index: got 4, want 9" {
		t.Fatalf("message = %q", f.Message)
	}
}

func TestNoError(t *testing.T) {
	if _, p := recovered(t, func() { assert.NoError(nil, "encode") }); p {
		t.Fatal("NoError panicked on nil")
	}
	f, p := recovered(t, func() { assert.NoError(errors.New("boom"), "encode") })
	if !p || f.Message != "encode: unexpected error: boom" {
		t.Fatalf("panicked=%v message=%q", p, f.Message)
	}
}

func TestFail(t *testing.T) {
	f, p := recovered(t, func() { assert.Fail("commit %d > last index %d", 7, 5) })
	if !p || f.Message != "commit 7 > last index 5" {
		t.Fatalf("panicked=%v message=%q", p, f.Message)
	}
}

// Values the benchmarks check: in variables, so that the compiler cannot
// fold the checks away, and above 255, which Go boxes without allocating.
var commit, last = uint64(1_000_005), uint64(1_000_007)

// BenchmarkPassingCheck measures a check that passes, with a message of
// two arguments: That boxes them on every call; the guarded Fail does not
// evaluate them at all.
func BenchmarkPassingCheck(b *testing.B) {
	b.Run("That", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			assert.That(commit <= last, "commit %d > last index %d", commit, last)
		}
	})
	b.Run("if-Fail", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			if commit > last {
				assert.Fail("commit %d > last index %d", commit, last)
			}
		}
	})
	b.Run("Equal", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			assert.Equal(commit, commit, "commit")
		}
	})
}
