package api_test

import (
	"encoding/json"
	"net/http"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"coord/api"
)

// The package is a leaf: it imports the standard library only, and of
// it nothing beyond what types for JSON and HTTP need.
func TestAPIIsALeaf(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		gobin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	out, err := exec.Command(gobin, "list", "-f", "{{join .Imports \" \"}}", "coord/api").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	allowed := []string{"encoding/json", "fmt", "net/http"}
	imports := strings.Fields(string(out))
	if len(imports) == 0 {
		t.Fatal("go list names no import of coord/api")
	}
	for _, imp := range imports {
		if !slices.Contains(allowed, imp) {
			t.Errorf("coord/api imports %s; allowed: %v", imp, allowed)
		}
	}
}

// The codes answer with the statuses docs/API.md lists, and Retry-After
// goes with the ones that another attempt may not get.
func TestCodesStatusAndRetry(t *testing.T) {
	for _, c := range []struct {
		code   api.Code
		status int
		retry  bool
	}{
		{api.CodeInvalid, 400, false},
		{api.CodeUnauthenticated, 401, false},
		{api.CodePermissionDenied, 403, false},
		{api.CodeNotFound, 404, false},
		{api.CodeConflict, 409, false},
		{api.CodeHeld, 409, false},
		{api.CodeLost, 409, false},
		{api.CodeStaleSequence, 409, false},
		{api.CodeUnavailable, 503, true},
		{api.CodeUnknownOutcome, 503, true},
		{api.CodeTimeout, 503, false},
		{api.CodeTooManyWatches, 503, true},
		{api.CodeStorageFailed, 503, true},
		{api.CodeDiskFull, 507, true},
		{api.CodeInternal, 500, false},
		{api.Code("no_such_code"), 500, false},
	} {
		if got := c.code.Status(); got != c.status {
			t.Errorf("%s: status %d, want %d", c.code, got, c.status)
		}
		if got := c.code.Retry(); got != c.retry {
			t.Errorf("%s: retry %v, want %v", c.code, got, c.retry)
		}
	}
}

// An error body carries a zero that means something (a conflict on an
// absent key: revision 0), and leaves out what its code does not carry.
func TestErrorResponseKeepsMeaningfulZeros(t *testing.T) {
	conflict := api.ErrorResponse{Error: "revision mismatch", Code: api.CodeConflict, Revision: new(uint64(0))}
	b, err := json.Marshal(conflict)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"error":"revision mismatch","code":"conflict","revision":0}`; string(b) != want {
		t.Fatalf("conflict body %s, want %s", b, want)
	}
	var back api.ErrorResponse
	if err := json.Unmarshal([]byte(`{"error":"lease held by b","code":"held","holder":"b","token":40}`), &back); err != nil {
		t.Fatal(err)
	}
	if back.Code != api.CodeHeld || back.Holder == nil || *back.Holder != "b" || back.Token == nil || *back.Token != 40 || back.Revision != nil {
		t.Fatalf("held body decoded as %+v", back)
	}
	if back.Code.Status() != http.StatusConflict {
		t.Fatalf("held answers %d", back.Code.Status())
	}
}

func TestParseTokenRole(t *testing.T) {
	for _, s := range []string{"read", "write", "admin"} {
		if r, err := api.ParseTokenRole(s); err != nil || string(r) != s {
			t.Errorf("%q: %q, %v", s, r, err)
		}
	}
	for _, s := range []string{"", "root", "Read"} {
		if _, err := api.ParseTokenRole(s); err == nil || !strings.Contains(err.Error(), "want read, write or admin") {
			t.Errorf("%q: %v, want an error naming the roles", s, err)
		}
	}
}
