package threads

import (
	"bytes"
	"context"
	"embed"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"coord/lab"
)

// programs are the articles' programs as standalone Go programs, one
// directory each: counter (built with -race to hear the race detector),
// deadlock and prodcons (built without cgo, so that the runtime can report a
// deadlock).
//
//go:embed testdata/programs
var programs embed.FS

// errNoToolchain means the go command is not installed, so nothing can be
// built. Experiments say so instead of guessing.
var errNoToolchain = errors.New("threads: go toolchain not found (looked on PATH, in $GOROOT/bin and the build's GOROOT)")

// goCommand finds the go command: on PATH, else under $GOROOT or the GOROOT
// this binary was built with (a `go run` leaves that in place).
func goCommand() (string, error) {
	if p, err := exec.LookPath("go"); err == nil {
		return p, nil
	}
	for _, root := range []string{os.Getenv("GOROOT"), runtime.GOROOT()} {
		if root == "" {
			continue
		}
		p := filepath.Join(root, "bin", "go")
		if info, err := os.Stat(p); err == nil && !info.IsDir() {
			return p, nil
		}
	}
	return "", errNoToolchain
}

// buildTimeout bounds a build: compiling the race-instrumented standard
// library on a cold cache takes tens of seconds on two cores.
const buildTimeout = 3 * time.Minute

// buildProgram writes the embedded program name into dir and builds it, with
// -race (which needs cgo) or with CGO_ENABLED=0. It returns the binary's
// path, or errNoToolchain, or the build's output on failure.
func buildProgram(ctx context.Context, dir, name string, race bool) (string, error) {
	goCmd, err := goCommand()
	if err != nil {
		return "", err
	}
	source, err := programs.ReadFile(path.Join("testdata/programs", name, "main.go"))
	if err != nil {
		return "", fmt.Errorf("threads: embedded program %s: %w", name, err)
	}
	src := filepath.Join(dir, "src-"+name)
	if err := os.MkdirAll(src, 0o755); err != nil {
		return "", fmt.Errorf("threads: %w", err)
	}
	// An old go directive builds with any toolchain from 1.22 on without
	// downloading another.
	files := map[string][]byte{"go.mod": []byte("module " + name + "\n\ngo 1.22\n"), "main.go": source}
	for file, data := range files {
		if err := os.WriteFile(filepath.Join(src, file), data, 0o644); err != nil {
			return "", fmt.Errorf("threads: %w", err)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, buildTimeout)
	defer cancel()
	bin := filepath.Join(dir, name)
	args := []string{"build", "-o", bin, "."}
	cgo := "CGO_ENABLED=0"
	if race {
		args = []string{"build", "-race", "-o", bin, "."}
		cgo = "CGO_ENABLED=1"
	}
	cmd := exec.CommandContext(ctx, goCmd, args...)
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=", "GOTOOLCHAIN=local", cgo)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("threads: go %s (%s): %w: %s", strings.Join(args[:len(args)-3], " "), cgo, err, firstLines(string(out), 5))
	}
	return bin, nil
}

// raceReport is what one run of the -race counter printed.
type raceReport struct {
	// Mode is racy or mutex.
	Mode string `json:"mode"`

	// Total is the counter's final value.
	Total int `json:"total"`

	// Races is the number of "WARNING: DATA RACE" reports.
	Races int `json:"races"`

	// ExitCode is the program's exit status (66 when the detector found a
	// race).
	ExitCode int `json:"exit_code"`

	// First summarises the first report: the two accesses, their
	// goroutines and the source line they point at.
	First string `json:"first,omitempty"`
}

// runRaceCounter runs the -race counter binary once in mode.
func runRaceCounter(ctx context.Context, bin, mode string, goroutines, increments int) (raceReport, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, mode, strconv.Itoa(goroutines), strconv.Itoa(increments))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	rep := raceReport{Mode: mode}
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		rep.ExitCode = exit.ExitCode()
	case err != nil:
		return rep, fmt.Errorf("threads: run %s counter under -race: %w", mode, err)
	}
	total, convErr := strconv.Atoi(strings.TrimSpace(stdout.String()))
	if convErr != nil {
		return rep, fmt.Errorf("threads: %s counter under -race printed %q (exit %d): %s", mode, stdout.String(), rep.ExitCode, firstLines(stderr.String(), 5))
	}
	rep.Total = total
	rep.Races = strings.Count(stderr.String(), "WARNING: DATA RACE")
	rep.First = summarizeRace(stderr.String())
	return rep, nil
}

var (
	accessLine = regexp.MustCompile(`(?m)^(Read|Write|Previous read|Previous write) at 0x[0-9a-f]+ by (goroutine \d+|main goroutine):`)
	frameLine  = regexp.MustCompile(`(?m)^\s+(\S+\.go):(\d+)`)
)

// summarizeRace reduces the first race report in stderr to one line: the
// two accesses, their goroutines, and the source line they point at.
func summarizeRace(stderr string) string {
	start := strings.Index(stderr, "WARNING: DATA RACE")
	if start < 0 {
		return ""
	}
	report := stderr[start:]
	if end := strings.Index(report, "=================="); end > 0 {
		report = report[:end]
	}
	var parts []string
	locs := accessLine.FindAllStringSubmatchIndex(report, 2)
	for i, loc := range locs {
		part := strings.ToLower(report[loc[2]:loc[3]]) + " by " + report[loc[4]:loc[5]]
		rest := report[loc[1]:]
		if i+1 < len(locs) {
			rest = report[loc[1]:locs[i+1][0]]
		}
		if m := frameLine.FindStringSubmatch(rest); m != nil {
			line, _ := strconv.Atoi(m[2])
			part += fmt.Sprintf(" at %s:%d", filepath.Base(m[1]), line)
			if src := sourceLine("counter", line); src != "" {
				part += " `" + src + "`"
			}
		}
		parts = append(parts, part)
	}
	return strings.Join(parts, ", ")
}

// sourceLine returns line n (1-based) of an embedded program, trimmed.
func sourceLine(program string, n int) string {
	source, err := programs.ReadFile(path.Join("testdata/programs", program, "main.go"))
	if err != nil {
		return ""
	}
	lines := strings.Split(string(source), "\n")
	if n < 1 || n > len(lines) {
		return ""
	}
	return strings.TrimSpace(lines[n-1])
}

// firstLines returns up to n lines of s joined by " | ", for error messages.
func firstLines(s string, n int) string {
	lines := strings.SplitN(strings.TrimSpace(s), "\n", n+1)
	if len(lines) > n {
		lines = lines[:n]
	}
	return strings.Join(lines, " | ")
}

// linksCgo reports whether this binary was built with cgo enabled. The Go
// runtime cannot detect "all goroutines are asleep" in a program that links
// cgo (its extra thread for C callbacks always counts as running), and the
// coord binary links cgo whenever it is built with a C compiler at hand,
// because package net does. Unknown counts as yes.
func linksCgo() bool {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return true
	}
	for _, s := range info.Settings {
		if s.Key == "CGO_ENABLED" {
			return s.Value != "0"
		}
	}
	return true
}

// harness runs one of the articles' deadlocking programs as a child process,
// in the best way this machine allows:
//
//   - the coord binary's own child, when coord was built without cgo;
//   - else the standalone program, built with CGO_ENABLED=0 by the go
//     toolchain;
//   - else the coord binary's child anyway, where the runtime cannot see the
//     deadlock: a short timeout and a goroutine dump (SIGQUIT) catch it.
type harness struct {
	// How says which of the three it is, for the report.
	How string `json:"how"`

	// Detects says whether the runtime can report the deadlock itself.
	Detects bool `json:"detects"`

	bin     string // the standalone program; "" to use the child
	child   string // the lab child's name
	timeout time.Duration
}

// Timeouts for a child: generous when the runtime reports deadlocks within
// milliseconds, short when only the timeout can tell.
const (
	childTimeoutDetected = 10 * time.Second
	childTimeoutBlind    = 3 * time.Second
)

// newHarness picks how to run the embedded program name (or the lab child
// child, its in-binary twin).
func newHarness(ctx context.Context, env *lab.Env, name, child string) (*harness, error) {
	h := &harness{child: child, Detects: true, timeout: childTimeoutDetected}
	if !linksCgo() {
		h.How = "a child process of the coord binary (built without cgo)"
		return h, nil
	}
	bin, err := buildProgram(ctx, env.Dir, name, false)
	if err == nil {
		h.bin = bin
		h.How = "the standalone program, built with go build and CGO_ENABLED=0, as a child process"
		return h, nil
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	env.Logger.Warn("deadlock detection unavailable", "program", name, "err", err)
	h.Detects, h.timeout = false, childTimeoutBlind
	h.How = "a child process of the coord binary, which links cgo, so the runtime cannot report deadlocks (" +
		err.Error() + "); a deadlock shows as a hang, caught by a timeout and a goroutine dump"
	return h, nil
}

// run runs the program with one argument and reads how it ended.
func (h *harness) run(ctx context.Context, env *lab.Env, arg string) (childRun, error) {
	var cmd *exec.Cmd
	if h.bin != "" {
		cmd = lab.Command(ctx, h.bin, arg)
	} else {
		cmd = env.ChildCommand(ctx, h.child, arg)
	}
	return runProcess(ctx, cmd, h.timeout)
}
