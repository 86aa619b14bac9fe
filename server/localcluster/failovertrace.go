package localcluster

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"os"
	"slices"
	"sync"
	"text/tabwriter"
	"time"

	"coord/api"
	"coord/client"
)

// FailoverAttempt is one HTTP attempt of the bench's writer (a write sent
// to one node), in Unix nanoseconds of this machine's clock: with the
// nodes' election trace (--node-log-level debug) it says where a gap's
// last milliseconds went (a refusal naming the new leader, the retry, the
// write on the new leader).
type FailoverAttempt struct {
	Host  string `json:"host"`
	Start int64  `json:"start_unix_ns"`
	End   int64  `json:"end_unix_ns"`
	// Status is the HTTP status (0: no answer; Err says why); Leader the
	// Coord-Leader header of the answer.
	Status int    `json:"status"`
	Leader string `json:"leader,omitempty"`
	Err    string `json:"err,omitempty"`
	// Reused says the attempt went out on a connection made before it
	// (no dial, no TLS handshake).
	Reused bool `json:"reused"`
}

// attemptLog is an http.RoundTripper that records the writes (PUT, POST,
// DELETE) it sends through next. It is safe for concurrent use.
type attemptLog struct {
	next http.RoundTripper
	mu   sync.Mutex
	all  []FailoverAttempt // in the order they ended
}

func (a *attemptLog) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		return a.next.RoundTrip(r)
	}
	at := FailoverAttempt{Host: r.URL.Host, Start: time.Now().UnixNano()}
	trace := &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) { at.Reused = info.Reused }}
	resp, err := a.next.RoundTrip(r.WithContext(httptrace.WithClientTrace(r.Context(), trace)))
	at.End = time.Now().UnixNano()
	if err != nil {
		at.Err = err.Error()
	} else {
		at.Status, at.Leader = resp.StatusCode, resp.Header.Get(api.HeaderLeader)
	}
	a.mu.Lock()
	a.all = append(a.all, at)
	a.mu.Unlock()
	return resp, err
}

// between returns the attempts that ended in [from, to].
func (a *attemptLog) between(from, to int64) []FailoverAttempt {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.DeleteFunc(slices.Clone(a.all), func(at FailoverAttempt) bool { return at.End < from || at.End > to })
}

// recordingHTTPClient returns the HTTP client the client package would
// make for itself (client.NewTransport), its writes recorded in log.
func recordingHTTPClient(tlsConfig *tls.Config, attemptTimeout time.Duration, log *attemptLog) *http.Client {
	log.next = client.NewTransport(client.Config{TLS: tlsConfig, AttemptTimeout: attemptTimeout})
	return &http.Client{Transport: log}
}

// The steps of a hand-over, in order, as FailoverEvent.Steps names them:
// the stopping leader's, its successor's, the voters' and the writer's.
const (
	StepStopping          = "stopping"                 // the old leader starts to stop
	StepTimeoutNowSent    = "timeout_now_sent"         // it tells the target to campaign
	StepTimeoutNowArrived = "timeout_now_received"     // the target hears it
	StepVotesAsked        = "vote_requests_sent"       // the target asks for votes
	StepFirstVote         = "first_vote_durable"       // a voter has written its vote
	StepFirstAppend       = "first_append_sent"        // the target leads: its first entry goes out
	StepHandedOver        = "handed_over"              // the old leader sees it
	StepHeldReleased      = "held_write_released"      // the old leader answers a held write
	StepRefusalNamed      = "client_refused_to_leader" // the writer hears a 503 naming the new leader
	StepAcknowledged      = "acknowledged"             // the first write acknowledged after that
)

// handOverSteps are the steps in order.
var handOverSteps = []string{StepStopping, StepTimeoutNowSent, StepTimeoutNowArrived, StepVotesAsked, StepFirstVote,
	StepFirstAppend, StepHandedOver, StepHeldReleased, StepRefusalNamed, StepAcknowledged}

// traceLine is one line of a node's JSON log (--log-format json) with the
// fields the election trace sets.
type traceLine struct {
	Time time.Time `json:"time"`
	Msg  string    `json:"msg"`
	Node uint64    `json:"node"`
	Type string    `json:"type"`
	To   uint64    `json:"to"`
}

// readTrace reads the JSON lines of the logs at paths (other lines are
// skipped), ordered by time.
func readTrace(paths []string) ([]traceLine, error) {
	var lines []traceLine
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		for raw := range bytes.Lines(data) {
			var l traceLine
			if len(raw) == 0 || raw[0] != '{' || json.Unmarshal(raw, &l) != nil {
				continue
			}
			lines = append(lines, l)
		}
	}
	slices.SortStableFunc(lines, func(a, b traceLine) int { return a.Time.Compare(b.Time) })
	return lines, nil
}

// addSteps sets ev.Steps from the nodes' trace lines and the writer's
// attempts: for each step, its first occurrence after the signal.
func (ev *FailoverEvent) addSteps(lines []traceLine) {
	start := time.Unix(0, ev.Signalled).Add(-time.Millisecond)
	end := time.Unix(0, max(ev.GapEnd, ev.Exited)).Add(5 * time.Millisecond)
	var target uint64
	steps := map[string]int64{}
	note := func(step string, at time.Time) {
		if _, ok := steps[step]; !ok {
			steps[step] = at.UnixNano() - ev.Signalled
		}
	}
	for _, l := range lines {
		if l.Time.Before(start) || l.Time.After(end) {
			continue
		}
		switch {
		case l.Msg == "trace: stopping":
			note(StepStopping, l.Time)
		case l.Msg == "trace: hand over" && target == 0:
			target = l.To
		case l.Msg == "trace: send" && l.Type == "TimeoutNow":
			note(StepTimeoutNowSent, l.Time)
		case l.Msg == "trace: received" && l.Type == "TimeoutNow":
			note(StepTimeoutNowArrived, l.Time)
		case l.Msg == "trace: send" && l.Type == "VoteRequest":
			note(StepVotesAsked, l.Time)
		case l.Msg == "trace: term and vote durable" && target != 0 && l.Node != target:
			note(StepFirstVote, l.Time)
		case l.Msg == "trace: send first append of the term" && target != 0 && l.Node == target:
			note(StepFirstAppend, l.Time)
		case l.Msg == "handed leadership over":
			note(StepHandedOver, l.Time)
		case l.Msg == "trace: held write released":
			note(StepHeldReleased, l.Time)
		}
	}
	if len(steps) == 0 {
		return // no trace: the nodes did not log at debug level in JSON
	}
	// The writer: the refusal naming the new leader, then the first write
	// acknowledged after the hand-over (not necessarily the gap's end: on
	// a loaded machine a later write can wait longer).
	after, handed := steps[StepHandedOver]
	for _, a := range ev.Attempts {
		if a.Status == http.StatusServiceUnavailable && a.Leader != "" {
			note(StepRefusalNamed, time.Unix(0, a.End))
			break
		}
	}
	if t, ok := steps[StepRefusalNamed]; ok {
		after, handed = t, true
	}
	for _, a := range ev.Attempts {
		if handed && a.Status/100 == 2 && a.End-ev.Signalled > after {
			note(StepAcknowledged, time.Unix(0, a.End))
			break
		}
	}
	ev.Steps = steps
}

// writeSteps prints, for the events that have steps, the median time of
// each step after the signal and the median time from the step before it
// (per event, then the median), and how many events had the step.
func writeSteps(w io.Writer, label string, events []FailoverEvent) error {
	var with []FailoverEvent
	for _, ev := range events {
		if len(ev.Steps) > 0 {
			with = append(with, ev)
		}
	}
	if len(with) == 0 {
		return nil
	}
	fmt.Fprintf(w, "\nwhere the time went, %s (%d events with a trace; medians):\n\n", label, len(with))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "step\tafter the signal\tafter the step before\tevents\t")
	prev := ""
	for _, step := range handOverSteps {
		var at, since []time.Duration
		for _, ev := range with {
			t, ok := ev.Steps[step]
			if !ok {
				continue
			}
			at = append(at, time.Duration(t))
			before := int64(0)
			if prev != "" {
				if before, ok = ev.Steps[prev]; !ok {
					continue
				}
			}
			since = append(since, time.Duration(t-before))
		}
		prev = step
		if len(at) == 0 {
			fmt.Fprintf(tw, "%s\t-\t-\t0\t\n", step)
			continue
		}
		sinceText := "-"
		if len(since) > 0 {
			sinceText = fmtMS(median(since))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t\n", step, fmtMS(median(at)), sinceText, len(at))
	}
	return tw.Flush()
}

func median(d []time.Duration) time.Duration {
	s := slices.Sorted(slices.Values(d))
	return s[len(s)/2]
}
