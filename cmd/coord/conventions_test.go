package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"coord/bench/failover"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// noJSON are the runnable commands without --json, each with the reason
// (docs/cli.md lists them).
var noJSON = map[string]string{
	"coord server":  "a daemon: its output is its log (--log-format json makes it JSON Lines)",
	"coord bench":   "prints its help",
	"coord lab run": "only dispatches to an experiment's command, which has --json",
}

// walkCommands calls f for every visible command of the tree, root first.
func walkCommands(c *cobra.Command, f func(*cobra.Command)) {
	if c.Hidden || c.Name() == "help" || c.Name() == "completion" {
		return
	}
	f(c)
	for _, sub := range c.Commands() {
		walkCommands(sub, f)
	}
}

// Every help page has an Example; every flag its usage line names exists;
// every example parses (the command exists, its flags exist and take the
// values given, its arguments are accepted); and every command that
// reports has --json.
func TestEveryCommandFollowsTheConventions(t *testing.T) {
	usageFlag := regexp.MustCompile(`--([a-z0-9][a-z0-9-]*)`)
	commands := 0
	walkCommands(newRootCmd(io.Discard, io.Discard), func(c *cobra.Command) {
		commands++
		path := c.CommandPath()
		t.Run(path, func(t *testing.T) {
			if strings.TrimSpace(c.Example) == "" {
				t.Errorf("%s: no Example section in its help", path)
			}
			for _, m := range usageFlag.FindAllStringSubmatch(c.Use, -1) {
				if c.Flags().Lookup(m[1]) == nil && c.InheritedFlags().Lookup(m[1]) == nil {
					t.Errorf("%s: the usage line %q names --%s, which the command does not have", path, c.Use, m[1])
				}
			}
			if c.Runnable() && c.Flags().Lookup("json") == nil {
				if _, ok := noJSON[path]; !ok {
					t.Errorf("%s reports but has no --json (or add it to noJSON with the reason)", path)
				}
			}
			for _, line := range exampleCommands(c.Example) {
				checkExample(t, path, line)
			}
		})
	})
	if commands < 30 {
		t.Fatalf("walked %d commands; the walk is broken", commands)
	}
}

// checkExample parses one example command line against a fresh command
// tree, as cobra would run it, without running it.
func checkExample(t *testing.T, path, line string) {
	t.Helper()
	words, err := shellWords(line)
	if err != nil || len(words) == 0 || words[0] != "coord" {
		t.Errorf("%s: example %q: cannot split it into words (%v)", path, line, err)
		return
	}
	root := newRootCmd(io.Discard, io.Discard)
	c, rest, err := root.Find(words[1:])
	if err != nil {
		t.Errorf("%s: example %q: %v", path, line, err)
		return
	}
	if c == root && len(words) > 1 && !strings.HasPrefix(words[1], "-") {
		t.Errorf("%s: example %q names no command", path, line)
		return
	}
	if err := c.ParseFlags(rest); errors.Is(err, pflag.ErrHelp) {
		return
	} else if err != nil {
		t.Errorf("%s: example %q: %v", path, line, err)
		return
	}
	if c.Args != nil {
		if err := c.Args(c, c.Flags().Args()); err != nil {
			t.Errorf("%s: example %q: %v", path, line, err)
		}
	}
}

// exampleCommands returns the coord command lines of an Example section:
// continuation lines joined, comments dropped, and each command of a line
// (split at && ; |) that starts with coord, up to a redirection.
func exampleCommands(example string) []string {
	var out []string
	joined := strings.ReplaceAll(example, "\\\n", " ")
	for _, line := range strings.Split(joined, "\n") {
		line = stripComment(strings.TrimSpace(line))
		for _, part := range regexp.MustCompile(`&&|;|\|`).Split(line, -1) {
			part, _, _ = strings.Cut(part, " > ")
			part, _, _ = strings.Cut(part, " 2> ")
			part = strings.TrimSpace(part)
			if strings.HasPrefix(part, "coord ") || part == "coord" {
				out = append(out, part)
			}
		}
	}
	return out
}

// stripComment removes a shell comment (# after a space, outside quotes).
func stripComment(line string) string {
	var quote rune
	for i, r := range line {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			}
		case r == '\'' || r == '"':
			quote = r
		case r == '#' && (i == 0 || line[i-1] == ' '):
			return strings.TrimSpace(line[:i])
		}
	}
	return line
}

// shellWords splits a command line into words as a POSIX shell would for
// the simple cases examples use: blanks, single and double quotes,
// backslashes.
func shellWords(line string) ([]string, error) {
	var (
		words []string
		word  strings.Builder
		in    bool
		quote rune
	)
	for i := 0; i < len(line); i++ {
		r := rune(line[i])
		switch {
		case quote == '\'':
			if r == '\'' {
				quote = 0
			} else {
				word.WriteRune(r)
			}
		case quote == '"':
			if r == '"' {
				quote = 0
			} else {
				word.WriteRune(r)
			}
		case r == '\'' || r == '"':
			quote, in = r, true
		case r == '\\' && i+1 < len(line):
			i++
			word.WriteByte(line[i])
			in = true
		case r == ' ' || r == '\t':
			if in {
				words = append(words, word.String())
				word.Reset()
				in = false
			}
		default:
			word.WriteRune(r)
			in = true
		}
	}
	if quote != 0 {
		return nil, errUnterminatedQuote
	}
	if in {
		words = append(words, word.String())
	}
	return words, nil
}

var errUnterminatedQuote = &usageError{err: io.ErrUnexpectedEOF}

func TestShellWords(t *testing.T) {
	got, err := shellWords(`coord elect --store 'raft://a,b?x=1&y=2' --name "my lease" a\ b`)
	want := []string{"coord", "elect", "--store", "raft://a,b?x=1&y=2", "--name", "my lease", "a b"}
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("shellWords = %q, %v; want %q", got, err, want)
	}
	if got := exampleCommands("  coord a --x 1   # comment\n  eval \"$(coord b)\" && coord c \\\n    --y 2"); !slices.Equal(got, []string{"coord a --x 1", "coord c      --y 2"}) {
		t.Errorf("exampleCommands = %q", got)
	}
}

// COORD_STORE names the store when --store is absent; --store wins.
func TestStoreFromEnvironment(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(envStore, "file://"+filepath.Join(dir, "env.lock"))
	code, _, stderr := runCLI(t, "run", "--id", "a", "--", "true")
	if code != exitOK {
		t.Fatalf("run with $%s: exit %d, stderr %q", envStore, code, stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "env.lock")); err != nil {
		t.Errorf("run did not use $%s: %v", envStore, err)
	}
	code, _, stderr = runCLI(t, "run", "--store", "file://"+filepath.Join(dir, "flag.lock"), "--id", "a", "--", "true")
	if code != exitOK {
		t.Fatalf("run with --store: exit %d, stderr %q", code, stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "flag.lock")); err != nil {
		t.Errorf("--store did not win over $%s: %v", envStore, err)
	}
}

// A store nobody answers for is handled the same way by every backend and
// every command that uses one (elect, watch, run):
// retries said on stderr, then, after --connect-timeout, exit 1 with one
// error line naming the flag, the store and the last error.
func TestUnreachableStoreEveryBackend(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // refused from now on
	for _, store := range []string{
		"redis://" + addr + "/0",
		"postgres://postgres@" + addr + "/postgres?sslmode=disable",
		"etcd://" + addr,
		"zk://" + addr,
		"raft://" + addr,
	} {
		for _, command := range [][]string{{"elect"}, {"watch"}, {"run", "--", "true"}} {
			t.Run(command[0]+"/"+strings.Split(store, ":")[0], func(t *testing.T) {
				done := make(chan struct{})
				var (
					code   int
					stderr string
				)
				args := append([]string{command[0], "--store", store, "--name", "x", "--connect-timeout", "2s"}, command[1:]...)
				go func() {
					defer close(done)
					code, _, stderr = runCLI(t, args...)
				}()
				select {
				case <-done:
				case <-time.After(2 * time.Minute): // a hang guard, far above the 2 s asked
					t.Fatalf("%v did not give up", args)
				}
				lines := strings.Split(strings.TrimSpace(stderr), "\n")
				last := lines[len(lines)-1]
				if code != exitFailure || !strings.HasPrefix(last, "coord: --store "+redactURL(store)+": no answer within --connect-timeout 2s (") ||
					!strings.Contains(last, "--connect-timeout 0 waits forever") {
					t.Errorf("exit %d, last stderr line %q; want 1 and the flag, the store and the attempts named", code, last)
				}
				// Stores whose clients retry inside one call (etcd, ZooKeeper,
				// coord's cluster) may spend the 2 s in one attempt; every
				// attempt retried is said on stderr.
				var attempts int
				if _, err := fmt.Sscanf(last[strings.Index(last, "(")+1:], "%d attempt", &attempts); err != nil {
					t.Fatalf("last line %q does not count the attempts: %v", last, err)
				}
				if said := strings.Count(stderr, "store unreachable; retrying"); said != attempts-1 {
					t.Errorf("%d attempts but %d retries said on stderr:\n%s", attempts, said, stderr)
				}
			})
		}
	}
}

// --check fails on a missed target only; without --check a miss is
// reported and the command succeeds (runFailoverBench returns nil).
func TestFailoverCheckFailsOnMissOnly(t *testing.T) {
	met := []failover.TargetResult{{Target: failover.Target{Signal: "killed", P99MSLT: 50}, P99MS: 20, Met: true}}
	if err := targetMisses(met); err != nil {
		t.Errorf("targets met: %v", err)
	}
	missed := append(met, failover.TargetResult{Target: failover.Target{Signal: "terminated", P99MSLT: 10}, P99MS: 12})
	if err := targetMisses(missed); err == nil || !strings.Contains(err.Error(), "target missed: terminated p99 12.00ms, not below 10ms") {
		t.Errorf("a target missed: %v", err)
	}
	if err := targetMisses(nil); err != nil {
		t.Errorf("no target applies: %v", err)
	}
}
