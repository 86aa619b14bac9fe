//go:build linux

package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// startLogged starts bin with args (with --log-format json) and returns its
// stdout lines and the metrics URL its log names.
func startLogged(t *testing.T, bin string, args ...string) (*exec.Cmd, <-chan string, string) {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"--log-format", "json"}, args...)...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	lines := make(chan string, 1000)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	logs := make(chan string, 1000)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			select {
			case logs <- sc.Text():
			default:
			}
		}
		close(logs)
	}()
	var entry struct {
		Msg string `json:"msg"`
		URL string `json:"url"`
	}
	for entry.URL == "" {
		l := waitLine(t, logs, `"serving metrics"`)
		if err := json.Unmarshal([]byte(l), &entry); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
	}
	return cmd, lines, entry.URL
}

// scrape returns the metrics page at url.
func scrape(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s, %v", url, resp.Status, err)
	}
	return string(body)
}

// metric returns the value of the sample named series (with its labels)
// on page, failing if there is none.
func metric(t *testing.T, page, series string) float64 {
	t.Helper()
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`)
	m := re.FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no sample %s on the metrics page:\n%s", series, page)
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// coord elect --metrics-addr, two real processes over a lock file: the
// leader's page shows it leads with its token and renewals; the watcher's
// shows the leader's token, then its own tenure once the leader resigns.
func TestElectMetricsAddr(t *testing.T) {
	bin := coordBinary(t)
	store := "file://" + filepath.Join(t.TempDir(), "leader.lock")
	const l = `{lease="leader.lock"}`
	a, aOut, aURL := startLogged(t, bin, "elect", "--store", store, "--id", "a", "--ttl", "3s", "--json", "--metrics-addr", "127.0.0.1:0")
	tokA := eventToken(t, waitLine(t, aOut, `"event":"elected"`))
	waitLine(t, aOut, `"event":"renewed"`)
	page := scrape(t, aURL)
	if got := metric(t, page, "coord_elector_is_leader"+l); got != 1 {
		t.Errorf("a: is_leader %v", got)
	}
	if got := metric(t, page, "coord_elector_token"+l); got != float64(tokA) {
		t.Errorf("a: token %v, want %d", got, tokA)
	}
	if got := metric(t, page, `coord_elector_renew_seconds_count{lease="leader.lock",result="ok"}`); got < 1 {
		t.Errorf("a: renew_seconds_count %v after a renewal", got)
	}
	if got := metric(t, page, "coord_elector_seconds_since_last_renew"+l); got < 0 || got > 60 {
		t.Errorf("a: seconds_since_last_renew %v", got)
	}
	metric(t, page, `coord_elector_info{holder="a",lease="leader.lock",store="file"}`)

	_, bOut, bURL := startLogged(t, bin, "elect", "--store", store, "--id", "b", "--ttl", "3s", "--json", "--metrics-addr", "127.0.0.1:0")
	waitLine(t, bOut, `"event":"leader"`)
	page = scrape(t, bURL)
	if got := metric(t, page, "coord_elector_is_leader"+l); got != 0 {
		t.Errorf("b: is_leader %v while a leads", got)
	}
	if got := metric(t, page, "coord_elector_observed_token"+l); got != float64(tokA) {
		t.Errorf("b: observed_token %v, want a's %d", got, tokA)
	}
	a.Process.Signal(syscall.SIGTERM)
	tokB := eventToken(t, waitLine(t, bOut, `"event":"elected"`))
	page = scrape(t, bURL)
	if got := metric(t, page, "coord_elector_is_leader"+l); got != 1 {
		t.Errorf("b: is_leader %v after a resigned", got)
	}
	if got := metric(t, page, "coord_elector_token"+l); got != float64(tokB) || tokB <= tokA {
		t.Errorf("b: token gauge %v, its token %d, a's %d", got, tokB, tokA)
	}
	if got := metric(t, page, "coord_elector_elected_total"+l); got != 1 {
		t.Errorf("b: elected_total %v", got)
	}
}

// eventToken returns the token of a --json event line.
func eventToken(t *testing.T, line string) uint64 {
	t.Helper()
	var ev struct {
		Token uint64 `json:"token"`
	}
	if err := json.Unmarshal([]byte(line), &ev); err != nil || ev.Token == 0 {
		t.Fatalf("event %q: token %d, %v", line, ev.Token, err)
	}
	return ev.Token
}

// coord run --metrics-addr: while the job runs, the page shows the lease
// held with the token the job was given.
func TestRunMetricsAddr(t *testing.T) {
	bin := coordBinary(t)
	store := "file://" + filepath.Join(t.TempDir(), "job.lock")
	run, out, url := startLogged(t, bin, "run", "--store", store, "--id", "r", "--ttl", "3s", "--metrics-addr", "127.0.0.1:0",
		"--", "sh", "-c", `echo "token=$COORD_FENCING_TOKEN"; exec sleep 60`)
	line := waitLine(t, out, "token=")
	tok, err := strconv.ParseUint(strings.TrimPrefix(line, "token="), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	page := scrape(t, url)
	if got := metric(t, page, `coord_elector_is_leader{lease="job.lock"}`); got != 1 {
		t.Errorf("is_leader %v while the job runs", got)
	}
	if got := metric(t, page, `coord_elector_token{lease="job.lock"}`); got != float64(tok) {
		t.Errorf("token gauge %v, the job's COORD_FENCING_TOKEN %d", got, tok)
	}
	run.Process.Signal(syscall.SIGTERM)
	run.Wait()
}

// A --metrics-addr that is not HOST:PORT, or not on loopback (the page
// has no authentication), is a usage error naming it; one that cannot be
// bound fails naming it.
func TestMetricsAddrBadInput(t *testing.T) {
	store := "file://" + filepath.Join(t.TempDir(), "x.lock")
	for _, addr := range []string{"9100", ":9100", "0.0.0.0:9100", "192.0.2.1:9100", "example.com:9100"} {
		code, _, stderr := runCLI(t, "elect", "--store", store, "--metrics-addr", addr)
		if code != exitUsage || !strings.Contains(stderr, fmt.Sprintf("--metrics-addr %q", addr)) {
			t.Errorf("--metrics-addr %s: exit %d, stderr %q", addr, code, stderr)
		}
	}
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	addr := taken.Addr().String()
	code, _, stderr := runCLI(t, "run", "--store", store, "--metrics-addr", addr, "--", "true")
	if code != exitFailure || !strings.Contains(stderr, "--metrics-addr "+addr) {
		t.Errorf("--metrics-addr on a port taken: exit %d, stderr %q", code, stderr)
	}
}
