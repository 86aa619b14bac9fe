package report

import (
	"io"
	"os"
	"sync"

	"github.com/schollz/progressbar/v3"

	"coord/lab"
)

// Progress returns a factory of progress sinks for lab.Config.Progress: a bar
// on w when w is a terminal, nothing otherwise (a log file or a pipe must not
// fill with carriage returns).
func Progress(w *os.File) func(name string) lab.Progress {
	if !isTerminal(w) {
		return nil
	}
	return func(string) lab.Progress { return &bar{w: w} }
}

func isTerminal(f *os.File) bool {
	if f == nil {
		return false
	}
	info, err := f.Stat()
	return err == nil && info.Mode()&os.ModeCharDevice != 0
}

// bar adapts a progressbar to lab.Progress. Experiments may call Start more
// than once (one phase after another); each phase gets a fresh bar.
//
// bar is safe for concurrent use.
type bar struct {
	w   io.Writer
	mu  sync.Mutex
	bar *progressbar.ProgressBar
}

func (b *bar) Start(label string, total int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.bar != nil {
		_ = b.bar.Finish()
	}
	b.bar = progressbar.NewOptions(total,
		progressbar.OptionSetWriter(b.w),
		progressbar.OptionSetDescription(label),
		progressbar.OptionShowCount(),
		progressbar.OptionSetWidth(30),
		progressbar.OptionClearOnFinish(),
		progressbar.OptionSetElapsedTime(true),
	)
}

func (b *bar) Step() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.bar != nil {
		_ = b.bar.Add(1)
	}
}

func (b *bar) Finish() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.bar != nil {
		_ = b.bar.Finish()
		_ = b.bar.Clear()
		b.bar = nil
	}
}
