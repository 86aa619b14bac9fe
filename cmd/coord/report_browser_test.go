package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/chromedp/chromedp"

	"coord/internal/browsertest"
)

// figures is what the browser shows of report.html's charts.
type figures struct {
	Figures int      `json:"figures"` // <figure> elements
	Images  int      `json:"images"`  // <img> in them
	Broken  []string `json:"broken"`  // alt text of images that did not load
	Missing int      `json:"missing"` // charts the report says it could not draw
}

// chartsShown opens url and reports its figures once the browser has
// decoded every image.
func chartsShown(t *testing.T, browser context.Context, url string) figures {
	t.Helper()
	if err := chromedp.Do(browser, chromedp.Navigate(url)); err != nil {
		t.Fatal(err)
	}
	got, err := chromedp.Run(browser, chromedp.Poll[figures](`(() => {
  const imgs = [...document.querySelectorAll('figure img')];
  if (!imgs.every((i) => i.complete)) return null;
  return {
    figures: document.querySelectorAll('figure').length,
    images: imgs.length,
    broken: imgs.filter((i) => i.naturalWidth === 0 || i.naturalHeight === 0).map((i) => i.alt),
    missing: document.querySelectorAll('figure .missing').length,
  };
})()`))
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// The lab's report.html, opened from disk in a real browser as a reader
// would open it, shows every chart: each image decoded to a picture with a
// size, none broken, none missing.
func TestLabReportChartsLoadInABrowser(t *testing.T) {
	browser := browsertest.Start(t)
	dir := t.TempDir()
	if code, out, stderr := runCLI(t, "lab", "run", "granularity", "--out", dir); code != exitOK {
		t.Fatalf("lab run granularity: exit %d\n%s%s", code, out, stderr)
	}
	got := chartsShown(t, browser, "file://"+filepath.Join(dir, "report.html"))
	if got.Figures == 0 || got.Images != got.Figures || len(got.Broken) > 0 || got.Missing > 0 {
		t.Fatalf("report.html shows %d figures, %d images, broken %v, %d not drawn; want every figure a loaded image", got.Figures, got.Images, got.Broken, got.Missing)
	}
	// The control: the same check sees a chart that does not decode.
	broken := filepath.Join(dir, "broken.html")
	if err := os.WriteFile(broken, []byte(`<figure><img src="data:image/png;base64,iVBORw0KGgo=" alt="bad chart"></figure>`), 0o644); err != nil {
		t.Fatal(err)
	}
	if bad := chartsShown(t, browser, "file://"+broken); len(bad.Broken) != 1 || bad.Broken[0] != "bad chart" {
		t.Fatalf("a page with a broken chart reads as %+v", bad)
	}
	if err := chromedp.Do(browser, chromedp.Navigate("file://"+filepath.Join(dir, "report.html"))); err != nil {
		t.Fatal(err)
	}
	page, err := chromedp.Run(browser, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	browsertest.Screenshot(t, "lab-report", page)
	chart, err := chromedp.Run(browser, chromedp.Screenshot(chromedp.CSS("figure img")))
	if err != nil {
		t.Fatal(err)
	}
	browsertest.Screenshot(t, "lab-chart", chart)
}
