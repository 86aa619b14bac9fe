package lease

import "testing"

func TestClassifyChanges(t *testing.T) {
	held := func(holder string, token uint64) Record { return Record{Name: "n", Holder: holder, Token: token} }
	for _, c := range []struct {
		first      bool
		last, next Record
		want       ChangeKind
	}{
		{true, Record{}, held("a", 1), ChangeCurrent},
		{true, held("a", 1), Record{Name: "n"}, ChangeCurrent},
		{false, Record{Name: "n"}, held("a", 1), ChangeAcquired},
		{false, held("a", 1), held("a", 1), ChangeRenewed},
		{false, held("a", 1), held("a", 2), ChangeAcquired}, // the same holder, a new tenure
		{false, held("a", 1), held("b", 3), ChangeAcquired}, // taken over after an expiry not seen
		{false, held("a", 1), Record{Name: "n", Token: 1}, ChangeFreed},
	} {
		if got := classify(c.first, c.last, c.next); got.Kind != c.want {
			t.Errorf("classify(%v, %+v, %+v) = %s, want %s", c.first, c.last, c.next, got.Kind, c.want)
		}
	}
}
