package main

import (
	"encoding/json"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

// The version comes from the build info: the module version the go command
// stamped, the VCS revision and dirty flag, the Go version, the platform.
func TestVersionFromBuildInfo(t *testing.T) {
	info := &debug.BuildInfo{GoVersion: "go1.26.8", Path: "coord/cmd/coord",
		Main: debug.Module{Path: "coord", Version: "v0.0.0-20261201120000-0123456789ab+dirty"},
		Settings: []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: "0123456789abcdef0123456789abcdef01234567"},
			{Key: "vcs.time", Value: "2026-12-01T12:00:00Z"}, {Key: "vcs.modified", Value: "true"}}}
	v := versionOf(info, "")
	want := buildVersion{Version: "v0.0.0-20261201120000-0123456789ab+dirty", Revision: "0123456789abcdef0123456789abcdef01234567",
		Time: "2026-12-01T12:00:00Z", Modified: true, GoVersion: "go1.26.8", Platform: runtime.GOOS + "/" + runtime.GOARCH,
		Module: "coord", Path: "coord/cmd/coord"}
	if v != want {
		t.Errorf("versionOf = %+v\nwant        %+v", v, want)
	}
	var b strings.Builder
	v.writeText(&b)
	if !strings.Contains(b.String(), "coord v0.0.0-20261201120000-0123456789ab+dirty (go1.26.8, ") ||
		!strings.Contains(b.String(), "revision: 0123456789abcdef0123456789abcdef01234567, with uncommitted changes") {
		t.Errorf("text:\n%s", b.String())
	}
	if v := versionOf(info, "v1.2.3"); v.Version != "v1.2.3" || v.Revision == "" {
		t.Errorf("a link-time version should win and keep the revision: %+v", v)
	}
	// No build info at all, or none of version control: say so.
	v = versionOf(nil, "")
	b.Reset()
	v.writeText(&b)
	if v.Version != "(devel)" || v.Revision != "" || !strings.Contains(b.String(), "revision: unknown (built without version control information") {
		t.Errorf("without build info: %+v\n%s", v, b.String())
	}
}

func TestVersionJSON(t *testing.T) {
	code, out, stderr := runCLI(t, "version", "--json")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var v buildVersion
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("not one JSON object: %v\n%s", err, out)
	}
	if v.GoVersion != runtime.Version() || v.Platform != runtime.GOOS+"/"+runtime.GOARCH || v.Version == "" {
		t.Errorf("version --json = %+v", v)
	}
}
