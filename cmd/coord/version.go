package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// version is set at link time with -ldflags "-X main.version=v1.2.3"; it
// wins over the build info's module version.
var version = ""

// buildVersion is what coord version reports, from the build info.
type buildVersion struct {
	// Version is the link-time version, else the main module's version as
	// the go command stamped it: a tag (v1.2.3), a pseudo-version
	// (v0.0.0-20261201120000-abcdef123456, +dirty when modified), or
	// "(devel)" when the build had no version control information.
	Version string `json:"version"`
	// Revision is the commit the binary was built from (vcs.revision),
	// Time its commit time, Modified whether the tree had uncommitted
	// changes; empty and false without version control information (go
	// run, -buildvcs=false, a build outside a git checkout).
	Revision string `json:"revision,omitempty"`
	Time     string `json:"time,omitempty"`
	Modified bool   `json:"modified"`
	// GoVersion is the toolchain that built the binary; Platform its
	// GOOS/GOARCH.
	GoVersion string `json:"go_version"`
	Platform  string `json:"platform"`
	// Module is the main module's path; Path the main package's.
	Module string `json:"module,omitempty"`
	Path   string `json:"path,omitempty"`
}

// readVersion returns the version of this binary.
func readVersion() buildVersion {
	info, _ := debug.ReadBuildInfo()
	return versionOf(info, version)
}

// versionOf returns the version that info (nil if unavailable) and the
// link-time version describe.
func versionOf(info *debug.BuildInfo, linked string) buildVersion {
	v := buildVersion{Version: "(devel)", GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if info != nil {
		v.GoVersion, v.Module, v.Path = info.GoVersion, info.Main.Path, info.Path
		if info.Main.Version != "" {
			v.Version = info.Main.Version
		}
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				v.Revision = s.Value
			case "vcs.time":
				v.Time = s.Value
			case "vcs.modified":
				v.Modified = s.Value == "true"
			}
		}
	}
	if linked != "" {
		v.Version = linked
	}
	return v
}

// writeText prints the version as one line, then the revision.
func (v buildVersion) writeText(w io.Writer) {
	fmt.Fprintf(w, "coord %s (%s, %s)\n", v.Version, v.GoVersion, v.Platform)
	switch {
	case v.Revision == "":
		fmt.Fprintln(w, "revision: unknown (built without version control information: go run, -buildvcs=false, or not from a git checkout)")
	case v.Modified:
		fmt.Fprintf(w, "revision: %s, with uncommitted changes (%s)\n", v.Revision, v.Time)
	default:
		fmt.Fprintf(w, "revision: %s (%s)\n", v.Revision, v.Time)
	}
}

func newVersionCmd() *cobra.Command {
	var jsonOut bool
	cmd := &cobra.Command{
		Use:   "version [--json]",
		Short: "Print coord's version, revision, Go version and platform",
		Long: `Print the version of this coord binary from its build information: the
module version (a tag, or a pseudo-version naming the commit), the git
revision it was built from and whether the tree had uncommitted changes,
the Go version that built it, and the platform. 'go install ./cmd/coord'
and 'go build' in a git checkout record the revision; 'go run' and
-buildvcs=false do not, and the revision is then reported unknown.

With --json, one JSON object: {"version", "revision", "time", "modified",
"go_version", "platform", "module", "path"}.`,
		Example: `  coord version
  coord version --json`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			v := readVersion()
			if jsonOut {
				return writeJSON(cmd.OutOrStdout(), v)
			}
			v.writeText(cmd.OutOrStdout())
			return nil
		},
	}
	addJSONFlag(cmd, &jsonOut, "print one JSON object")
	return cmd
}
