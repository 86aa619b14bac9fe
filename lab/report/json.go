package report

import (
	"encoding/json"
	"io"
	"runtime"
	"time"

	"coord/lab"
)

// Document is the JSON document `coord lab --json` writes: the machine the
// results were measured on, and every result.
type Document struct {
	// Tool names the producer: "coord lab".
	Tool string `json:"tool"`

	// Started is when the run began; Seconds how long it took in all.
	Started time.Time `json:"started"`
	Seconds float64   `json:"seconds"`

	// Machine describes where the figures were measured.
	Machine Machine `json:"machine"`

	// Results holds one entry per experiment, in the order they ran.
	Results []*lab.Result `json:"results"`
}

// Machine describes the machine and runtime that produced the results:
// figures like the granularity ratio mean little without it.
type Machine struct {
	GOOS       string `json:"goos"`
	GOARCH     string `json:"goarch"`
	GoVersion  string `json:"go_version"`
	NumCPU     int    `json:"num_cpu"`
	GOMAXPROCS int    `json:"gomaxprocs"`
	// LoadAverage is the one-minute load average when the run began (-1
	// where unknown): other work on the machine shapes every timing.
	LoadAverage float64 `json:"load_average"`
}

// ThisMachine describes the running process's machine.
func ThisMachine() Machine {
	return Machine{
		GOOS: runtime.GOOS, GOARCH: runtime.GOARCH, GoVersion: runtime.Version(),
		NumCPU: runtime.NumCPU(), GOMAXPROCS: runtime.GOMAXPROCS(0), LoadAverage: lab.LoadAverage(),
	}
}

// NewDocument wraps results measured since started on this machine.
func NewDocument(started time.Time, results []*lab.Result) Document {
	if results == nil {
		results = []*lab.Result{}
	}
	return Document{
		Tool: "coord lab", Started: started, Seconds: time.Since(started).Seconds(),
		Machine: ThisMachine(), Results: results,
	}
}

// WriteJSON writes doc as one indented JSON document.
func WriteJSON(w io.Writer, doc Document) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(doc)
}
