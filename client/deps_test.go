package client_test

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// goList runs go list with args in this module and returns its lines.
func goList(t *testing.T, args ...string) []string {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		gobin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	out, err := exec.Command(gobin, append([]string{"list"}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("go list %v: %v\n%s", args, err, out)
	}
	return strings.Fields(string(out))
}

// A program that uses the client, or raft:// leases, links neither the
// server nor what it is built on: the Raft core, the write-ahead log and
// snapshots, the transport, the node shell, prometheus. The HTTP API's
// types come from coord/api, a leaf.
func TestClientLinksNoServer(t *testing.T) {
	forbidden := []string{"coord/server", "coord/raft", "coord/storage", "coord/transport", "coord/node",
		"github.com/prometheus/"}
	for _, pkg := range []string{"coord/client", "coord/lease/raftlease"} {
		deps := goList(t, "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", pkg)
		if len(deps) == 0 {
			t.Fatalf("go list names no dependency of %s, not even itself", pkg)
		}
		for _, dep := range deps {
			for _, f := range forbidden {
				if dep == strings.TrimSuffix(f, "/") || strings.HasPrefix(dep, strings.TrimSuffix(f, "/")+"/") {
					t.Errorf("%s depends on %s", pkg, dep)
				}
			}
		}
	}
}
