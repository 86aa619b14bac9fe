package localcluster

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"coord/client"
	"coord/internal/browsertest"
)

// spkiPins returns the base64 SHA-256 of each node certificate's public
// key: Chromium trusts exactly these (--ignore-certificate-errors-spki-list),
// as a user who installed the cluster's CA would trust the nodes.
func spkiPins(t *testing.T, c *Cluster) string {
	t.Helper()
	var pins []string
	for _, id := range c.IDs() {
		raw, err := os.ReadFile(filepath.Join(c.cfg.Dir, TLSDir, fmt.Sprintf("node-%d.crt", id)))
		if err != nil {
			t.Fatal(err)
		}
		block, _ := pem.Decode(raw)
		if block == nil {
			t.Fatalf("node-%d.crt: no PEM block", id)
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(cert.RawSubjectPublicKeyInfo)
		pins = append(pins, base64.StdEncoding.EncodeToString(sum[:]))
	}
	return strings.Join(pins, ",")
}

// pageState is what the page shows, read from the DOM.
type pageState struct {
	Rows      int    `json:"rows"`
	Leaders   []int  `json:"leaders"` // nodes whose row says leader
	Down      []int  `json:"down"`    // nodes whose row says unreachable
	Summary   int    `json:"summary"` // the leader the header names
	TalkingTo int    `json:"talking"` // the node the page reads
	Conn      string `json:"conn"`
	Login     bool   `json:"login"` // the token form is shown
}

// readPage is a JavaScript expression of the pageState the page shows.
const readPage = `(() => {
  const rows = [...document.querySelectorAll('#nodes tbody tr')];
  const ids = (f) => rows.filter(f).map((r) => Number(r.dataset.node));
  return {
    rows: rows.length,
    leaders: ids((r) => r.dataset.role === 'leader'),
    down: ids((r) => r.dataset.reachable !== 'true'),
    summary: Number(document.querySelector('#summary').dataset.leader || 0),
    talking: Number(document.querySelector('#conn').dataset.node || 0),
    conn: document.querySelector('#conn').textContent,
    login: !document.querySelector('#login').hidden,
  };
})()`

// waitPage waits until the page shows a state s for which the JavaScript
// condition holds (the browser checks it at every DOM change), and returns
// that state and how long it took; after deadline it fails the test with
// what the page shows.
func waitPage(t *testing.T, ctx context.Context, deadline time.Duration, what, condition string) (pageState, time.Duration) {
	t.Helper()
	start := time.Now()
	st, err := pollPage(ctx, deadline, condition)
	if err != nil {
		now, rerr := chromedp.Run(ctx, chromedp.Evaluate[pageState](readPage))
		t.Fatalf("after %v the page does not show %s (%v): it shows %+v (%v)", time.Since(start).Round(time.Millisecond), what, err, now, rerr)
	}
	return st, time.Since(start)
}

func pollPage(ctx context.Context, deadline time.Duration, condition string) (pageState, error) {
	expr := `(() => { const s = ` + readPage + `; return (` + condition + `) ? s : null; })()`
	return chromedp.Run(ctx, chromedp.Poll[pageState](expr, chromedp.WithPollingMutation(), chromedp.WithPollingTimeout(deadline)))
}

// agreedLeader waits until the page shows three nodes, one leader, the
// node the running nodes agree leads, and what else holds. Under load the
// leader may change while the page catches up; then it waits for the page
// to show the next one.
func agreedLeader(t *testing.T, ctx, browser context.Context, c *Cluster, among []uint64, also string) (pageState, uint64) {
	t.Helper()
	var last error
	for range 5 {
		leader, err := c.WaitLeader(ctx, among...)
		if err != nil {
			t.Fatal(err)
		}
		st, err := pollPage(browser, 10*time.Second, fmt.Sprintf(
			`!s.login && s.rows === 3 && s.leaders.length === 1 && s.leaders[0] === %[1]d && s.summary === %[1]d && (%[2]s)`, leader, also))
		if err == nil {
			return st, leader
		}
		last = err
	}
	now, _ := chromedp.Run(browser, chromedp.Evaluate[pageState](readPage))
	t.Fatalf("the page never showed three nodes and the cluster's leader (%v): it shows %+v", last, now)
	return pageState{}, 0
}

// TestUIFollowsTheClusterInABrowser opens /ui/ of a secure 3-node cluster
// in headless Chromium, logs in with a token, and checks what a person
// would: three nodes and one leader; after the leader is killed (the very
// node that served the page), the new leader, reached through another
// node; then a lease acquired by a client, with its fencing token.
func TestUIFollowsTheClusterInABrowser(t *testing.T) {
	if browsertest.Find() == "" && os.Getenv("COORD_TEST_REQUIRE_SERVERS") == "" {
		t.Skip("no chromium installed (apt-get install chromium); scripts/test.sh installs it")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := Start(ctx, Config{Nodes: 3, Dir: t.TempDir(), Binary: os.Args[0], SelfServe: true, Args: []string{"--tick", "20ms"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	firstLeader, err := c.WaitLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var leaderHTTP string
	for _, n := range c.Nodes() {
		if n.ID == firstLeader {
			leaderHTTP = n.HTTP
		}
	}

	browser := browsertest.Start(t, "ignore-certificate-errors-spki-list="+spkiPins(t, c))
	if err := chromedp.Do(browser, chromedp.Navigate("https://"+leaderHTTP+"/ui/")); err != nil {
		t.Fatal(err)
	}
	// The page has no token yet: the dashboard answers 401 and the page
	// asks for one.
	waitPage(t, browser, 20*time.Second, "the token form", `s.login`)
	if err := chromedp.Do(browser,
		chromedp.SendKeys(chromedp.ID("token"), c.Access().Token),
		chromedp.Click(chromedp.CSS(`#login-form button[type="submit"]`)),
	); err != nil {
		t.Fatal(err)
	}
	st, leader := agreedLeader(t, ctx, browser, c, nil, `s.down.length === 0`)
	if st.TalkingTo != int(firstLeader) {
		t.Fatalf("the page talks to node %d; it was served by node %d", st.TalkingTo, firstLeader)
	}
	shot, err := chromedp.Run(browser, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	browsertest.Screenshot(t, "ui-before-kill", shot)

	// Kill the leader, which is also the node the page talks to (unless
	// the load moved leadership since): the page must move to another
	// node and show the new leader.
	if leader != firstLeader {
		t.Logf("leadership moved from node %d to node %d while the page loaded: the page keeps talking to node %d", firstLeader, leader, firstLeader)
	}
	killed := time.Now()
	if err := c.Kill(leader); err != nil {
		t.Fatal(err)
	}
	st, next := agreedLeader(t, ctx, browser, c, c.Except(leader),
		fmt.Sprintf(`s.down.length === 1 && s.down[0] === %[1]d && s.talking !== %[1]d && s.talking !== 0`, leader))
	t.Logf("the page showed node %d leading, through node %d, %v after node %d was killed", next, st.TalkingTo, time.Since(killed).Round(time.Millisecond), leader)

	// A lease taken by a client appears with its holder and token.
	cl, err := client.New(c.ClientConfig())
	if err != nil {
		t.Fatal(err)
	}
	l, err := cl.Acquire(ctx, "ui-demo", "billing-worker-1", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("billing-worker-1/%d", l.Token)
	probe := `(() => { const r = document.querySelector('#leases tr[data-lease="ui-demo"]'); return r ? r.dataset.holder + '/' + r.dataset.token : ''; })()`
	if _, err := chromedp.Run(browser, chromedp.Poll[bool](probe+` === '`+want+`'`, chromedp.WithPollingMutation(), chromedp.WithPollingTimeout(20*time.Second))); err != nil {
		got, _ := chromedp.Run(browser, chromedp.Evaluate[string](probe))
		t.Fatalf("lease row shows %q, want %q (%v)", got, want, err)
	}
	// The elections list names the new leader.
	elected, err := chromedp.Run(browser, chromedp.Evaluate[bool](fmt.Sprintf(`!!document.querySelector('#elections li[data-leader="%d"]')`, next)))
	if err != nil || !elected {
		t.Fatalf("the elections list does not show node %d elected (%v)", next, err)
	}
	shot, err = chromedp.Run(browser, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	browsertest.Screenshot(t, "ui", shot)
}
