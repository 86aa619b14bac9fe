package server

import (
	"fmt"
	"time"
	"unicode/utf16"
	"unicode/utf8"
)

// The API's checks of what a client sends, before anything is proposed or
// forwarded. Each returns an error wrapping ErrInvalid (400 invalid).

// checkName refuses a key or lease name (what says which) that is not valid
// UTF-8. The API answers names in JSON, which can only carry text: an
// invalid byte would come back as U+FFFD, and two different keys would
// look the same to every reader.
func checkName(what, name string) error {
	if !utf8.ValidString(name) {
		return fmt.Errorf("%w: %s %q is not valid UTF-8", ErrInvalid, what, name)
	}
	return nil
}

// checkJSONText refuses a JSON body that is not valid UTF-8 or that escapes
// a lone UTF-16 surrogate ("\ud800"). RFC 8259 requires UTF-8, but
// encoding/json decodes both kinds of string as U+FFFD without an error, so
// that two holders that differ would be stored as the same one.
func checkJSONText(body []byte) error {
	if !utf8.Valid(body) {
		return fmt.Errorf("%w: request body is not valid UTF-8", ErrInvalid)
	}
	for i := 0; i < len(body); i++ {
		if body[i] != '\\' {
			continue
		}
		i++ // the escaped character: skipped below unless it is \u
		if i >= len(body) || body[i] != 'u' {
			continue
		}
		r, ok := hex4(body[i+1:])
		if !ok {
			continue // a syntax error, which the decoder reports
		}
		i += 4
		if !utf16.IsSurrogate(r) {
			continue
		}
		// A high surrogate must be followed at once by an escaped low one.
		var low rune
		if r < 0xdc00 && i+6 < len(body) && body[i+1] == '\\' && body[i+2] == 'u' {
			low, ok = hex4(body[i+3:])
			if ok && low >= 0xdc00 && low <= 0xdfff {
				i += 6
				continue
			}
		}
		return fmt.Errorf("%w: request body escapes a lone UTF-16 surrogate (\\u%04x), which is not a character", ErrInvalid, r)
	}
	return nil
}

// hex4 decodes the four hexadecimal digits at the start of b.
func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case '0' <= c && c <= '9':
			r = r<<4 | rune(c-'0')
		case 'a' <= c && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case 'A' <= c && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}

// ttlFromMs converts a request's ttl_ms to a Duration, refusing values
// beyond ttlMax before the multiplication can overflow: unchecked,
// 18446744073711000 ms wrapped around to a lease of 1.4 s.
func ttlFromMs(ttlMs int64, ttlMax time.Duration) (time.Duration, error) {
	if ttlMs < 0 || ttlMs > ttlMax.Milliseconds() {
		return 0, fmt.Errorf("%w: ttl_ms %d out of range [0, %d]", ErrInvalid, ttlMs, ttlMax.Milliseconds())
	}
	return time.Duration(ttlMs) * time.Millisecond, nil
}

// watchTimeout converts a watch's timeout_ms (has: it was given) to the
// time the long poll waits: 30 s by default, at most watchTimeoutMax. A
// value beyond the maximum waits the maximum, as documented; it is
// compared before it is multiplied, so that it cannot overflow into a
// negative wait.
func watchTimeout(timeoutMs uint64, has bool) time.Duration {
	switch {
	case !has:
		return watchTimeoutDefault
	case timeoutMs >= uint64(watchTimeoutMax/time.Millisecond):
		return watchTimeoutMax
	default:
		return time.Duration(timeoutMs) * time.Millisecond
	}
}
