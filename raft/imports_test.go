package raft_test

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The core must stay pure (STYLE rule 1): no network, files, clocks, locks
// or global randomness. This test reads the imports of every non-test file
// of the core packages and checks them against an allow-list.
func TestCoreImportsOnlyAllowedPackages(t *testing.T) {
	allowed := map[string]bool{
		"encoding/binary": true, "errors": true, "fmt": true, "slices": true,
		"strconv": true, "strings": true,
		// For raft.Snapshot's data reader: types and in-memory readers, no
		// I/O of their own (the core never calls them).
		"bytes": true, "io": true,
		"coord/internal/assert": true, "coord/internal/wire": true, "coord/raft/quorum": true,
	}
	for _, dir := range []string{".", "quorum"} {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil || len(files) == 0 {
			t.Fatalf("no Go files in %s: %v", dir, err)
		}
		for _, path := range files {
			if strings.HasSuffix(path, "_test.go") {
				continue
			}
			src, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			f, err := parser.ParseFile(token.NewFileSet(), path, src, parser.ImportsOnly)
			if err != nil {
				t.Fatal(err)
			}
			for _, imp := range f.Imports {
				p, _ := strconv.Unquote(imp.Path.Value)
				if !allowed[p] {
					t.Errorf("%s imports %q, which the pure core must not (allowed: %v)", path, p, allowed)
				}
			}
		}
	}
}
