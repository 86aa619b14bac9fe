package browsertest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/chromedp/chromedp"
)

// browsers are the names Chromium goes by, Debian's first.
var browsers = []string{"chromium", "chromium-browser", "google-chrome", "headless-shell"}

// Find returns the path of a Chromium, or "" if none is installed.
func Find() string {
	for _, name := range browsers {
		if path, err := exec.LookPath(name); err == nil {
			return path
		}
	}
	return ""
}

// Start runs a headless Chromium for the test and returns a context for
// chromedp actions in its first tab; the browser stops when the test ends.
// flags are extra command-line flags ("name=value" or "name").
func Start(t testing.TB, flags ...string) context.Context {
	t.Helper()
	path := Find()
	if path == "" {
		if os.Getenv("COORD_TEST_REQUIRE_SERVERS") != "" {
			t.Fatal("no chromium: scripts/test.sh installs it (ensure_pkg chromium)")
		}
		t.Skip("no chromium installed (apt-get install chromium); scripts/test.sh installs it")
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.UserDataDir(t.TempDir()), // a fresh profile: no cache, no cookies, no certificates
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Headless,
		chromedp.DisableGPU,
		chromedp.NoSandbox, // tests run as root in CI, where Chromium's sandbox refuses to start
		chromedp.WindowSize(1280, 900),
		// The machine's network is closed: nothing may try to reach it.
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-default-apps", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("metrics-recording-only", true),
		chromedp.Flag("safebrowsing-disable-auto-update", true),
		chromedp.Flag("disable-features", "Translate,OptimizationHints,MediaRouter,AutofillServerCommunication"),
		chromedp.Flag("password-store", "basic"),
		chromedp.Flag("force-color-profile", "srgb"),
		chromedp.Flag("hide-scrollbars", true),
	}
	for _, f := range flags {
		name, value, hasValue := cut(f)
		if hasValue {
			opts = append(opts, chromedp.Flag(name, value))
		} else {
			opts = append(opts, chromedp.Flag(name, true))
		}
	}
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(alloc, chromedp.WithLogf(t.Logf))
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
	})
	if err := chromedp.Do(ctx); err != nil { // starts the browser
		t.Fatalf("start %s: %v", path, err)
	}
	return ctx
}

func cut(flag string) (name, value string, hasValue bool) {
	for i := range len(flag) {
		if flag[i] == '=' {
			return flag[:i], flag[i+1:], true
		}
	}
	return flag, "", false
}

// Screenshot saves png as NAME.png in the test's artifact directory and,
// if COORD_SCREENSHOTS names a directory, there too. It returns the
// artifact's path.
func Screenshot(t testing.TB, name string, png []byte) string {
	t.Helper()
	path := filepath.Join(t.ArtifactDir(), name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
	if dir := os.Getenv("COORD_SCREENSHOTS"); dir != "" {
		if err := os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return path
}
