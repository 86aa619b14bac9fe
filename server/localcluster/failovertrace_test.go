package localcluster

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The hand-over's steps come from the nodes' JSON trace lines and the
// writer's attempts: each step's first line after the signal (the write
// acknowledged: the first after the refusal naming the new leader), the
// TimeoutNow's target telling the voters from the candidate; lines before
// the signal, lines of other messages and text lines are left out.
func TestHandOverStepsFromTheTrace(t *testing.T) {
	signal := time.Date(2026, 12, 1, 20, 0, 0, 0, time.UTC)
	at := func(ms float64) string {
		return signal.Add(time.Duration(ms * float64(time.Millisecond))).Format(time.RFC3339Nano)
	}
	dir := t.TempDir()
	logs := map[string][]string{
		"node-1.log": { // the stopping leader
			`time=2026-12-01T20:00:00.001Z level=INFO msg="a text line"`,
			fmt.Sprintf(`{"time":%q,"msg":"handed leadership over","node":1}`, at(-50)),
			fmt.Sprintf(`{"time":%q,"msg":"trace: stopping"}`, at(0.5)),
			fmt.Sprintf(`{"time":%q,"msg":"trace: hand over","node":1,"to":2}`, at(0.6)),
			fmt.Sprintf(`{"time":%q,"msg":"trace: send","node":1,"type":"TimeoutNow","to":2}`, at(0.7)),
			fmt.Sprintf(`{"time":%q,"msg":"trace: term and vote durable","node":1}`, at(5)),
			fmt.Sprintf(`{"time":%q,"msg":"handed leadership over","node":1,"to":2}`, at(7)),
			fmt.Sprintf(`{"time":%q,"msg":"trace: held write released","node":1}`, at(7.5)),
		},
		"node-2.log": { // the target
			fmt.Sprintf(`{"time":%q,"msg":"trace: received","node":2,"type":"TimeoutNow"}`, at(1)),
			fmt.Sprintf(`{"time":%q,"msg":"trace: send","node":2,"type":"VoteRequest","to":1}`, at(1.1)),
			fmt.Sprintf(`{"time":%q,"msg":"trace: term and vote durable","node":2}`, at(4)),
			fmt.Sprintf(`{"time":%q,"msg":"trace: send first append of the term","node":2,"to":1}`, at(6)),
		},
	}
	var paths []string
	for name, lines := range logs {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	lines, err := readTrace(paths)
	if err != nil {
		t.Fatal(err)
	}
	ns := func(ms float64) int64 { return int64(ms * float64(time.Millisecond)) }
	ev := FailoverEvent{Signalled: signal.UnixNano(), GapEnd: signal.UnixNano() + ns(12), Exited: signal.UnixNano() + ns(20),
		Attempts: []FailoverAttempt{
			{Status: 200, End: signal.UnixNano() + ns(2)},
			{Status: 503, Leader: "2", End: signal.UnixNano() + ns(8)},
			{Status: 200, End: signal.UnixNano() + ns(12)},
			{Status: 200, End: signal.UnixNano() + ns(30)},
		}}
	ev.addSteps(lines)
	want := map[string]float64{StepStopping: 0.5, StepTimeoutNowSent: 0.7, StepTimeoutNowArrived: 1, StepVotesAsked: 1.1,
		StepFirstVote: 5, StepFirstAppend: 6, StepHandedOver: 7, StepHeldReleased: 7.5, StepRefusalNamed: 8, StepAcknowledged: 12}
	for step, ms := range want {
		if got, ok := ev.Steps[step]; !ok || got != ns(ms) {
			t.Errorf("step %s at %v (found %v), want %v ms", step, time.Duration(got), ok, ms)
		}
	}
	if len(ev.Steps) != len(want) {
		t.Errorf("steps %v, want only %v", ev.Steps, want)
	}
	var out bytes.Buffer
	if err := writeSteps(&out, "SIGTERM", []FailoverEvent{ev, {}}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "1 events with a trace") || !strings.Contains(out.String(), "first_vote_durable") {
		t.Errorf("the table:\n%s", out.String())
	}
}
