//go:build linux

package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The docs test (issue 19): the shell blocks of README.md and docs/*.md
// marked runnable run, in order, as written, in one scratch directory,
// against the coord binary built from this tree, as a user who followed
// README's install step would run them. docs/cli.md documents the markers:
//
//	<!-- docs-test: run -->                     the next shell block runs
//	<!-- docs-test: run expect="TEXT" cleanup="CMD" -->  (or expect='TEXT' if TEXT has ")
//	                                            ... its output must contain TEXT (repeatable);
//	                                            CMD runs at the end, even after a failure
//	<!-- docs-test: illustrative -->            the next shell block is not run
//
// A block fails on any non-zero exit (bash -e -o pipefail) or a missing
// expected output. Variables exported and the directory changed to carry
// over to the next block, as in one terminal. Every shell block of README.md
// must be marked one way or the other; in docs/*.md, unmarked blocks are
// listed in the test's log.

// docBlock is one fenced shell block of a Markdown file.
type docBlock struct {
	file    string // relative to the repository
	line    int    // of the opening fence, from 1
	marker  string // "run", "illustrative" or "" (none)
	expects []string
	cleanup []string
	body    string
}

var (
	docMarker = regexp.MustCompile(`^<!--\s*docs-test:\s*(run|illustrative)\b(.*?)-->\s*$`)
	docAttr   = regexp.MustCompile(`(expect|cleanup)=(?:"([^"]*)"|'([^']*)')`)
	docFence  = regexp.MustCompile("^(\\s*)```\\s*([A-Za-z0-9_-]*)")
)

// shellLangs are the fence languages that mark a shell block.
var shellLangs = []string{"sh", "bash", "shell"}

// parseDocBlocks returns the shell blocks of a Markdown document, with the
// docs-test marker on the nearest non-blank line before each.
func parseDocBlocks(file string, text []byte) ([]docBlock, error) {
	var (
		blocks  []docBlock
		prev    string // the last non-blank line outside a block
		inBlock bool
		indent  string
		cur     *docBlock
		body    strings.Builder
	)
	sc := bufio.NewScanner(bytes.NewReader(text))
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if inBlock {
			if strings.TrimSpace(line) == "```" {
				inBlock = false
				if cur != nil {
					cur.body = body.String()
					blocks = append(blocks, *cur)
					cur = nil
				}
				prev = ""
				continue
			}
			if cur != nil {
				body.WriteString(strings.TrimPrefix(line, indent))
				body.WriteByte('\n')
			}
			continue
		}
		if m := docFence.FindStringSubmatch(line); m != nil {
			inBlock, indent = true, m[1]
			if slices.Contains(shellLangs, m[2]) {
				cur = &docBlock{file: file, line: n}
				body.Reset()
				if mm := docMarker.FindStringSubmatch(strings.TrimSpace(prev)); mm != nil {
					cur.marker = mm[1]
					for _, a := range docAttr.FindAllStringSubmatch(mm[2], -1) {
						v := a[2] + a[3] // one of them is empty
						if a[1] == "expect" {
							cur.expects = append(cur.expects, v)
						} else {
							cur.cleanup = append(cur.cleanup, v)
						}
					}
					if cur.marker == "illustrative" && (len(cur.expects) > 0 || len(cur.cleanup) > 0) {
						return nil, fmt.Errorf("%s:%d: an illustrative block with expect= or cleanup=", file, n)
					}
				}
			}
			continue
		}
		if strings.TrimSpace(line) != "" {
			prev = line
		}
	}
	if inBlock {
		return nil, fmt.Errorf("%s: a code block is not closed", file)
	}
	return blocks, sc.Err()
}

func TestParseDocBlocks(t *testing.T) {
	doc := "text\n<!-- docs-test: run expect=\"a b\" expect='c'  cleanup=\"coord cluster down --dir /tmp/c\" -->\n```sh\necho a b c\n```\n" +
		"```go\nx := 1\n```\n<!-- docs-test: illustrative -->\n\n```bash\nrm -rf /\n```\n- item:\n  ```sh\n  echo indented\n  ```\n"
	blocks, err := parseDocBlocks("x.md", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if len(blocks) != 3 {
		t.Fatalf("%d blocks, want 3: %+v", len(blocks), blocks)
	}
	b := blocks[0]
	if b.marker != "run" || b.line != 3 || b.body != "echo a b c\n" || !slices.Equal(b.expects, []string{"a b", "c"}) || !slices.Equal(b.cleanup, []string{"coord cluster down --dir /tmp/c"}) {
		t.Errorf("first block %+v", b)
	}
	if blocks[1].marker != "illustrative" || blocks[1].body != "rm -rf /\n" {
		t.Errorf("second block %+v", blocks[1])
	}
	if blocks[2].marker != "" || blocks[2].body != "echo indented\n" {
		t.Errorf("third block %+v", blocks[2])
	}
	if _, err := parseDocBlocks("y.md", []byte("```sh\necho\n")); err == nil {
		t.Error("an unclosed block was accepted")
	}
	if _, err := parseDocBlocks("z.md", []byte("<!-- docs-test: illustrative expect=\"x\" -->\n```sh\necho\n```\n")); err == nil {
		t.Error("an illustrative block with expect= was accepted")
	}
}

// docBlockTimeout bounds one block; the test's whole run is bounded by the
// number of blocks marked runnable.
const docBlockTimeout = 3 * time.Minute

func TestDocsRun(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the documentation's commands (-short)")
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(files)
	files = append([]string{filepath.Join(root, "README.md")}, files...)
	var run []docBlock
	for _, f := range files {
		text, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, f)
		blocks, err := parseDocBlocks(rel, text)
		if err != nil {
			if rel == "README.md" {
				t.Fatal(err)
			}
			// Another document's broken fence must not stop README's
			// commands from being checked; its blocks are not run.
			t.Errorf("%v (its blocks are not run)", err)
			continue
		}
		var unmarked []string
		for _, b := range blocks {
			switch b.marker {
			case "run":
				run = append(run, b)
			case "":
				unmarked = append(unmarked, fmt.Sprint(b.line))
			}
		}
		switch {
		case len(unmarked) > 0 && rel == "README.md":
			t.Errorf("README.md: shell blocks at lines %s are neither runnable nor illustrative (docs/cli.md, \"Docs that run\")", strings.Join(unmarked, ", "))
		case len(unmarked) > 0:
			t.Logf("%s: unmarked shell blocks (not run) at lines %s", rel, strings.Join(unmarked, ", "))
		}
	}
	if len(run) == 0 {
		t.Fatal("no block marked runnable: the markers or the parser are broken")
	}

	bin := coordBinary(t)
	scratch := t.TempDir()
	state := filepath.Join(scratch, ".docs-test")
	work := filepath.Join(scratch, "work")
	for _, d := range []string{state, work} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	envFile, cwdFile := filepath.Join(state, "env"), filepath.Join(state, "cwd")
	if err := os.WriteFile(cwdFile, []byte(work+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(envFile, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	// A fresh user's environment: coord first on PATH, none of coord's
	// variables set.
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "COORD_") && !strings.HasPrefix(kv, "PATH=") {
			env = append(env, kv)
		}
	}
	env = append(env, "PATH="+filepath.Dir(bin)+string(os.PathListSeparator)+os.Getenv("PATH"))

	shell := func(ctx context.Context, script string) ([]byte, error) {
		cmd := exec.CommandContext(ctx, "bash", "-c", script)
		cmd.Dir = work
		cmd.Env = env
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
		cmd.WaitDelay = 5 * time.Second
		return cmd.CombinedOutput()
	}
	var cleanups []string
	defer func() {
		for _, c := range slices.Backward(cleanups) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			out, err := shell(ctx, c)
			cancel()
			// A block that ran to its end has stopped what it started
			// itself: its cleanup's error matters only after a failure.
			if err != nil && t.Failed() {
				t.Logf("cleanup %q: %v\n%s", c, err, out)
			}
		}
	}()
	for _, b := range run {
		cleanups = append(cleanups, b.cleanup...)
		// One terminal: the previous block's directory and exported
		// variables, then the block as written, then what it leaves.
		script := fmt.Sprintf("set -eo pipefail\ncd %q\nsource %q\n%s\npwd > %q\nexport -p | grep -v -E '^declare -x (PWD|OLDPWD|SHLVL)=' > %q\n",
			strings.TrimSpace(mustRead(t, cwdFile)), envFile, b.body, cwdFile, envFile)
		ctx, cancel := context.WithTimeout(context.Background(), docBlockTimeout)
		start := time.Now()
		out, err := shell(ctx, script)
		cancel()
		took := time.Since(start).Round(100 * time.Millisecond)
		if err != nil {
			t.Fatalf("%s:%d: the block failed after %v: %v\n--- block\n%s--- output\n%s", b.file, b.line, took, err, b.body, out)
		}
		for _, e := range b.expects {
			if !bytes.Contains(out, []byte(e)) {
				t.Fatalf("%s:%d: the output lacks %q\n--- block\n%s--- output\n%s", b.file, b.line, e, b.body, out)
			}
		}
		t.Logf("%s:%d: ran in %v", b.file, b.line, took)
	}
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
