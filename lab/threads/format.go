package threads

import (
	"fmt"
	"strconv"
)

// commas formats n with thousands separators: 1,000,000.
func commas(n int) string {
	s := strconv.Itoa(n)
	neg := n < 0
	if neg {
		s = s[1:]
	}
	var out []byte
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	if neg {
		return "-" + string(out)
	}
	return string(out)
}

// millis formats a time in seconds as milliseconds with sensible precision.
func millis(seconds float64) string {
	ms := seconds * 1000
	switch {
	case ms >= 100:
		return fmt.Sprintf("%.0f ms", ms)
	case ms >= 1:
		return fmt.Sprintf("%.1f ms", ms)
	default:
		return fmt.Sprintf("%.3f ms", ms)
	}
}
