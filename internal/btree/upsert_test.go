package btree

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
)

// pair is an item with a key and a value, ordered by key only, so that
// Upsert has something to carry over from the old item.
type pair struct{ key, value int }

func pairLess(a, b pair) bool { return a.key < b.key }

// contents returns t's items in order.
func contents(t *BTreeG[pair]) []pair {
	var out []pair
	t.Ascend(func(p pair) bool { out = append(out, p); return true })
	return out
}

// modelContents returns the model's items in key order.
func modelContents(m map[int]int) []pair {
	var out []pair
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, pair{k, m[k]})
	}
	return out
}

// TestUpsertMatchesAMap checks Upsert against a map over random
// operations (insert, replace from the old item, decline, delete) on a
// small-degree tree, so that nodes split and merge often, with clones
// taken along the way: every clone must keep the items it was taken with
// (copy-on-write), and the tree must hold exactly the model's items.
func TestUpsertMatchesAMap(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		rng := rand.New(rand.NewPCG(seed, 7))
		tree := NewG(2+int(seed%3), pairLess)
		model := map[int]int{}
		type clone struct {
			tree *BTreeG[pair]
			want []pair
		}
		var clones []clone
		for step := range 3000 {
			key := rng.IntN(300)
			switch op := rng.IntN(10); {
			case op < 7: // add 1 to the old value, or insert 1; decline if decline
				decline := op == 6
				calls := 0
				old, existed := tree.Upsert(pair{key: key}, func(old pair, exists bool) (pair, bool) {
					calls++
					if _, ok := model[key]; exists != ok || (exists && old != pair{key, model[key]}) {
						t.Fatalf("seed %d step %d: update got (%v, %v), the model has %d: %v", seed, step, old, exists, key, model[key])
					}
					return pair{key, old.value + 1}, !decline
				})
				if calls != 1 {
					t.Fatalf("seed %d step %d: update ran %d times, want once", seed, step, calls)
				}
				if v, ok := model[key]; existed != ok || (ok && old != pair{key, v}) {
					t.Fatalf("seed %d step %d: Upsert returned (%v, %v), the model has (%d, %v)", seed, step, old, existed, v, ok)
				}
				if !decline {
					model[key]++
				}
			case op < 9:
				tree.Delete(pair{key: key})
				delete(model, key)
			default:
				clones = append(clones, clone{tree.Clone(), modelContents(model)})
			}
			if tree.Len() != len(model) {
				t.Fatalf("seed %d step %d: Len %d, the model has %d", seed, step, tree.Len(), len(model))
			}
		}
		if got, want := contents(tree), modelContents(model); !slices.Equal(got, want) {
			t.Fatalf("seed %d: tree holds %v, want %v", seed, got, want)
		}
		for i, c := range clones {
			if got := contents(c.tree); !slices.Equal(got, c.want) {
				t.Fatalf("seed %d: clone %d changed: holds %v, want %v", seed, i, got, c.want)
			}
		}
	}
}

// TestUpsertOnEmptyTree covers the tree with no root yet, declined and
// then accepted.
func TestUpsertOnEmptyTree(t *testing.T) {
	tree := NewG(2, pairLess)
	if _, existed := tree.Upsert(pair{key: 1}, func(pair, bool) (pair, bool) { return pair{1, 1}, false }); existed || tree.Len() != 0 {
		t.Fatalf("declined on an empty tree: existed %v, Len %d, want false and 0", existed, tree.Len())
	}
	if _, existed := tree.Upsert(pair{key: 1}, func(pair, bool) (pair, bool) { return pair{1, 1}, true }); existed || tree.Len() != 1 {
		t.Fatalf("accepted on an empty tree: existed %v, Len %d, want false and 1", existed, tree.Len())
	}
}

// ExampleBTreeG_Upsert counts words in one descent per word.
func ExampleBTreeG_Upsert() {
	type count struct {
		word string
		n    int
	}
	tree := NewG(32, func(a, b count) bool { return a.word < b.word })
	for _, w := range []string{"b", "a", "b", "c", "b"} {
		tree.Upsert(count{word: w}, func(old count, exists bool) (count, bool) {
			return count{w, old.n + 1}, true
		})
	}
	tree.Ascend(func(c count) bool { fmt.Println(c.word, c.n); return true })
	// Output:
	// a 1
	// b 3
	// c 1
}
