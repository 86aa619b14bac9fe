package raft

import (
	"errors"
	"reflect"
	"testing"
)

func TestConfChangeRoundTrip(t *testing.T) {
	for _, cc := range []ConfChange{
		{},
		{Changes: []ConfChangeSingle{{Type: ConfChangeAddVoter, NodeID: 1}}},
		{Changes: []ConfChangeSingle{{ConfChangeAddLearner, 1 << 40}, {ConfChangeRemove, 7}}, Context: []byte("10.0.0.7:7000")},
	} {
		got, err := UnmarshalConfChange(cc.Marshal())
		if err != nil || !reflect.DeepEqual(got, cc) {
			t.Errorf("round trip of %+v = %+v, %v", cc, got, err)
		}
	}
}

func TestUnmarshalConfChangeRejectsGarbage(t *testing.T) {
	good := ConfChange{Changes: []ConfChangeSingle{{ConfChangeAddVoter, 3}}, Context: []byte("x")}.Marshal()
	for _, data := range [][]byte{nil, {9}, good[:len(good)-1], append(good, 0), {1, 200}} {
		if _, err := UnmarshalConfChange(data); !errors.Is(err, ErrInvalidConfChange) {
			t.Errorf("UnmarshalConfChange(%v) = %v, want ErrInvalidConfChange", data, err)
		}
	}
}

func TestApplyConfChange(t *testing.T) {
	base := ConfState{Voters: []uint64{1, 2, 3}, Learners: []uint64{4}}
	change := func(cs ...ConfChangeSingle) ConfChange { return ConfChange{Changes: cs} }
	tests := []struct {
		name string
		from ConfState
		cc   ConfChange
		want ConfState
		err  bool
	}{
		{"bootstrap many voters", ConfState{}, change(ConfChangeSingle{ConfChangeAddVoter, 2}, ConfChangeSingle{ConfChangeAddVoter, 1}),
			ConfState{Voters: []uint64{1, 2}}, false},
		{"promote learner", base, change(ConfChangeSingle{ConfChangeAddVoter, 4}), ConfState{Voters: []uint64{1, 2, 3, 4}}, false},
		{"demote voter", base, change(ConfChangeSingle{ConfChangeAddLearner, 3}), ConfState{Voters: []uint64{1, 2}, Learners: []uint64{3, 4}}, false},
		{"remove voter", base, change(ConfChangeSingle{ConfChangeRemove, 1}), ConfState{Voters: []uint64{2, 3}, Learners: []uint64{4}}, false},
		{"add learners freely", base, change(ConfChangeSingle{ConfChangeAddLearner, 5}, ConfChangeSingle{ConfChangeAddLearner, 6}),
			ConfState{Voters: []uint64{1, 2, 3}, Learners: []uint64{4, 5, 6}}, false},
		{"two voters at once: joint", base, change(ConfChangeSingle{ConfChangeAddVoter, 4}, ConfChangeSingle{ConfChangeRemove, 1}),
			ConfState{Voters: []uint64{2, 3, 4}, VotersOutgoing: []uint64{1, 2, 3}}, false},
		{"leave joint", ConfState{Voters: []uint64{2, 3, 4}, VotersOutgoing: []uint64{1, 2, 3}}, change(),
			ConfState{Voters: []uint64{2, 3, 4}}, false},
		{"change while joint", ConfState{Voters: []uint64{2, 3}, VotersOutgoing: []uint64{1, 2}}, change(ConfChangeSingle{ConfChangeAddLearner, 7}),
			ConfState{Voters: []uint64{2, 3}, VotersOutgoing: []uint64{1, 2}}, true},
		{"empty change outside joint", base, change(), base, true},
		{"no voters left", ConfState{Voters: []uint64{1}}, change(ConfChangeSingle{ConfChangeRemove, 1}), ConfState{Voters: []uint64{1}}, true},
		{"node 0", base, change(ConfChangeSingle{ConfChangeAddLearner, 0}), base, true},
		{"unknown type", base, change(ConfChangeSingle{9, 5}), base, true},
	}
	for _, tt := range tests {
		got, err := ApplyConfChange(tt.from, tt.cc)
		if (err != nil) != tt.err || (err != nil && !errors.Is(err, ErrInvalidConfChange)) {
			t.Errorf("%s: err = %v, want error %v", tt.name, err, tt.err)
		}
		if !got.Equal(tt.want) {
			t.Errorf("%s: got %v, want %v", tt.name, got, tt.want)
		}
	}
}
