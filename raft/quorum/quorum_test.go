package quorum

import (
	"fmt"
	"testing"
)

func TestCommittedIndex(t *testing.T) {
	tests := []struct {
		acked map[uint64]uint64
		want  uint64
	}{
		{map[uint64]uint64{}, 0},
		{map[uint64]uint64{1: 5}, 5},
		{map[uint64]uint64{1: 5, 2: 3}, 3},
		{map[uint64]uint64{1: 5, 2: 3, 3: 4}, 4},
		{map[uint64]uint64{1: 9, 2: 1, 3: 1, 4: 9}, 1},
		{map[uint64]uint64{1: 9, 2: 1, 3: 2, 4: 9, 5: 7}, 7},
		{map[uint64]uint64{1: 1, 2: 2, 3: 3, 4: 4, 5: 5, 6: 6, 7: 7, 8: 8, 9: 9}, 5},
	}
	for _, tt := range tests {
		var m Majority
		for id := range tt.acked {
			m = append(m, id)
		}
		got := m.CommittedIndex(func(id uint64) uint64 { return tt.acked[id] })
		if got != tt.want {
			t.Errorf("%v: CommittedIndex = %d, want %d", tt.acked, got, tt.want)
		}
	}
}

func TestVoteResult(t *testing.T) {
	tests := []struct {
		voters Majority
		votes  map[uint64]bool
		want   VoteResult
	}{
		{nil, nil, VoteLost},
		{Majority{1}, map[uint64]bool{1: true}, VoteWon},
		{Majority{1, 2, 3}, map[uint64]bool{1: true}, VotePending},
		{Majority{1, 2, 3}, map[uint64]bool{1: true, 2: true}, VoteWon},
		{Majority{1, 2, 3}, map[uint64]bool{1: true, 2: false}, VotePending},
		{Majority{1, 2, 3}, map[uint64]bool{1: true, 2: false, 3: false}, VoteLost},
		{Majority{1, 2, 3, 4}, map[uint64]bool{1: true, 2: true, 3: false}, VotePending},
		{Majority{1, 2, 3, 4}, map[uint64]bool{1: true, 2: false, 3: false}, VoteLost},
		{Majority{1, 2, 3}, map[uint64]bool{1: true, 9: true}, VotePending}, // 9 is not a voter
	}
	for _, tt := range tests {
		if got := tt.voters.VoteResult(tt.votes); got != tt.want {
			t.Errorf("%v %v: VoteResult = %v, want %v", tt.voters, tt.votes, got, tt.want)
		}
	}
}

// Any two majorities of the same set intersect: a brute-force check over all
// subsets of up to 7 voters, the property the whole of Raft rests on.
func TestMajoritiesIntersect(t *testing.T) {
	for n := 1; n <= 7; n++ {
		m := make(Majority, n)
		for i := range m {
			m[i] = uint64(i + 1)
		}
		for a := 0; a < 1<<n; a++ {
			for b := 0; b < 1<<n; b++ {
				if popcount(a) >= m.Size() && popcount(b) >= m.Size() && a&b == 0 {
					t.Fatalf("n=%d: disjoint majorities %b and %b", n, a, b)
				}
			}
		}
	}
}

func popcount(x int) int {
	c := 0
	for ; x != 0; x &= x - 1 {
		c++
	}
	return c
}

func ExampleMajority_CommittedIndex() {
	voters := Majority{1, 2, 3, 4, 5}
	match := map[uint64]uint64{1: 12, 2: 12, 3: 9, 4: 7, 5: 3}
	fmt.Println(voters.CommittedIndex(func(id uint64) uint64 { return match[id] }))
	// Output: 9
}

func TestJoint(t *testing.T) {
	j := Joint{Incoming: Majority{1, 2, 4}, Outgoing: Majority{1, 2, 3}}
	acked := map[uint64]uint64{1: 9, 2: 3, 3: 8, 4: 2}
	// Incoming (1 2 4): 9 3 2 → 3. Outgoing (1 2 3): 9 3 8 → 8. Both: 3.
	if got := j.CommittedIndex(func(id uint64) uint64 { return acked[id] }); got != 3 {
		t.Errorf("joint CommittedIndex = %d, want 3", got)
	}
	tests := []struct {
		votes map[uint64]bool
		want  VoteResult
	}{
		{map[uint64]bool{1: true, 2: true}, VoteWon},
		{map[uint64]bool{1: true, 4: true}, VotePending}, // outgoing lacks a majority yet
		{map[uint64]bool{1: true, 4: true, 3: true}, VoteWon},
		{map[uint64]bool{1: true, 3: true, 2: false, 4: false}, VoteLost},
	}
	for _, tt := range tests {
		if got := j.VoteResult(tt.votes); got != tt.want {
			t.Errorf("joint VoteResult(%v) = %v, want %v", tt.votes, got, tt.want)
		}
	}
	if ids := j.IDs(); len(ids) != 4 || !j.Contains(3) || !j.Contains(4) {
		t.Errorf("IDs() = %v", ids)
	}
	plain := Joint{Incoming: Majority{1, 2, 3}}
	if plain.IsJoint() || plain.VoteResult(map[uint64]bool{1: true, 2: true}) != VoteWon {
		t.Error("a Joint without outgoing voters is not a plain majority")
	}
}
