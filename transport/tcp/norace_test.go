//go:build !race

package tcp

// raceEnabled reports whether the race detector is on: it changes
// allocation counts (sync.Pool drops items at random under it).
const raceEnabled = false
