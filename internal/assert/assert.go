package assert

import "fmt"

// Failure is the value a failed assertion panics with. Recovering code (a
// test, or a simulator that prints the seed before re-panicking) can tell an
// invariant violation apart from other panics by its type.
type Failure struct {
	// Message says what was expected and what was found.
	Message string
}

// Error returns the message, prefixed with "assertion failed: ".
func (f Failure) Error() string { return "assertion failed: " + f.Message }

// Fail panics with a Failure carrying the formatted message. Call it behind
// the invariant's own test, so that a check that passes costs only that
// test: nothing is formatted, boxed or allocated.
//
//	if commit > last {
//		assert.Fail("commit %d > last index %d", commit, last)
//	}
func Fail(format string, args ...any) {
	panic(Failure{Message: fmt.Sprintf(format, args...)})
}

// That panics with a Failure carrying the formatted message when cond is false.
// The message should name both sides of the broken relation.
//
// Go evaluates args before the call, so each check costs their conversion
// to interfaces (an allocation for most non-constant values) even when it
// passes: write `if !cond { assert.Fail(...) }` instead wherever the
// message has arguments (BenchmarkPassingCheck measures both).
func That(cond bool, format string, args ...any) {
	if !cond {
		panic(Failure{Message: fmt.Sprintf(format, args...)})
	}
}

// Equal panics with a Failure naming both values when got != want. what says
// which quantity was compared.
func Equal[T comparable](got, want T, what string) {
	if got != want {
		panic(Failure{Message: fmt.Sprintf("%s: got %v, want %v", what, got, want)})
	}
}

// NoError panics with a Failure when err is not nil. Use it only where an
// error is impossible unless coord itself is broken (encoding into a
// bytes.Buffer, say); operating errors are returned, never asserted.
func NoError(err error, what string) {
	if err != nil {
		panic(Failure{Message: fmt.Sprintf("%s: unexpected error: %v", what, err)})
	}
}
