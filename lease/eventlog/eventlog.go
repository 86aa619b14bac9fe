package eventlog

import (
	"encoding/json"
	"io"
	"os"
	"sync"
	"time"

	"coord/lease"
)

// Writer writes lease.Events as JSON lines. It is safe for concurrent use:
// each event is written whole, by one call to the underlying io.Writer.
type Writer struct {
	mu  sync.Mutex
	enc *json.Encoder
	id  string
	pid int
}

// NewWriter returns a Writer that writes to w on behalf of the participant
// id.
func NewWriter(w io.Writer, id string) *Writer {
	return &Writer{enc: json.NewEncoder(w), id: id, pid: os.Getpid()}
}

// Write stamps ev with the time (both clocks), the writer's id and pid, and
// writes it as one line. It returns the stamped event.
func (w *Writer) Write(ev lease.Event) (lease.Event, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	ev.MonoNS = MonotonicNow()
	ev.Time = time.Now()
	ev.ID, ev.PID = w.id, w.pid
	return ev, w.enc.Encode(ev)
}
