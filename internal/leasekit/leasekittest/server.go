package leasekittest

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"strings"
	"testing"
)

// RequireServersEnv, when set (scripts/test.sh sets it to 1), turns a
// missing test server into a failure instead of a skip: in CI no backend
// may go untested in silence.
const RequireServersEnv = "COORD_TEST_REQUIRE_SERVERS"

// ServerURL returns the store URL in the environment variable env
// (COORD_TEST_REDIS, say). When it is unset the test is skipped with a
// message naming the variable, or fails if RequireServersEnv is set.
func ServerURL(t testing.TB, env string) string {
	t.Helper()
	u := os.Getenv(env)
	if u != "" {
		return u
	}
	if os.Getenv(RequireServersEnv) != "" {
		t.Fatalf("%s is not set, and %s is: the server must be running (scripts/test.sh starts it)", env, RequireServersEnv)
	}
	t.Skipf("%s is not set: run scripts/test.sh, or point %s at a server to test against", env, env)
	return ""
}

// Name returns a lease name unique to this test and run, so that tests of
// several packages can share one server.
func Name(t testing.TB) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return strings.NewReplacer("/", "-", " ", "-").Replace(t.Name()) + "-" + hex.EncodeToString(b[:])
}
