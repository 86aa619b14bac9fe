package sim

import (
	"errors"
	"testing"
)

func TestMeasureElections(t *testing.T) {
	ec := PaperElectionConfig()
	ec.Trials = 50
	res, err := MeasureElections(ec, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Failed != 0 || len(res.Times) != ec.Trials {
		t.Fatalf("%d of %d failovers failed", res.Failed, ec.Trials)
	}
	// A new leader cannot appear before the first election timeout after
	// the last heartbeat: at least 150 ms minus one heartbeat interval.
	floor := ticks(ec, ec.ElectionTicks-ec.HeartbeatTicks)
	if res.Times[0] < floor {
		t.Errorf("fastest failover %v beats the timeout floor %v", res.Times[0], floor)
	}
	if _, err := MeasureElections(ElectionConfig{}, nil); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("zero trials: %v, want ErrInvalidConfig", err)
	}
}
