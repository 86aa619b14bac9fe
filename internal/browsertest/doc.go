// Package browsertest drives a real headless Chromium from tests, through
// the DevTools protocol (github.com/chromedp/chromedp): coord's page at
// /ui/ and the lab's report.html are checked as a person would see them.
//
// Start finds Debian's chromium (scripts/test.sh installs it) and runs it
// with a fresh profile and everything that would reach the network turned
// off. Without a browser the test is skipped, or fails when
// COORD_TEST_REQUIRE_SERVERS is set, as CI sets it. Screenshot saves a PNG
// in the test's artifact directory (go test -artifacts keeps it) and, when
// COORD_SCREENSHOTS is set to a directory, there too: scripts/screenshots.sh
// makes the README's pictures (docs/img) that way.
package browsertest
