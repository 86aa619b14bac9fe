package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

// Exit codes of the coord command.
const (
	exitOK      = 0 // success
	exitFailure = 1 // the command ran and failed
	exitUsage   = 2 // unknown command or flag, bad value
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run executes the command line args and returns the process exit code. It is
// separate from main so that tests can call it in-process.
func run(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root := newRootCmd(stdout, stderr)
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return exitOK
	}
	var exit *exitError
	if errors.As(err, &exit) {
		// The command already reported what happened (a child's exit status
		// passing through, say); only the code is left to return.
		return exit.code
	}
	if isUsageError(err) {
		fmt.Fprintf(stderr, "coord: %v\n", err)
		fmt.Fprintf(stderr, "Run '%s --help' for usage.\n", cmd.CommandPath())
		return exitUsage
	}
	fmt.Fprintf(stderr, "coord: %v\n", err)
	return exitFailure
}

// usageError marks an error as the caller's mistake (a bad flag value, a
// missing argument); the command exits 2 with a hint.
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

// usagef returns a usage error with a formatted message.
func usagef(format string, args ...any) error {
	return &usageError{err: fmt.Errorf(format, args...)}
}

// exitError carries an exit code chosen by the command itself, for example
// the exit status of a child process that `coord run` passes through.
type exitError struct{ code int }

func (e *exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// isUsageError reports whether err is a usage error, including the ones cobra
// creates itself for unknown commands.
func isUsageError(err error) bool {
	var u *usageError
	if errors.As(err, &u) {
		return true
	}
	return strings.HasPrefix(err.Error(), "unknown command ")
}
