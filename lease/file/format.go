package file

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"time"
)

// The on-disk formats are described in the package doc (doc.go). Both the
// lock file and each guard slot are one line:
//
//	<magic> <crc32c of json, 8 hex digits> <json>\n

const (
	recordMagic  = "coord-lease/v1"
	slotMagic    = "coord-guard/v1"
	reserveMagic = "coord-reserve/v1"
	slotSize     = 1024 // bytes per guard slot
	maxHolder    = 512  // bytes; keeps a slot well under slotSize

	// Guard file layout: two tenure slots, then two reservation slots.
	tenureSlotsAt  = 0
	reserveSlotsAt = 2 * slotSize
	guardSize      = 4 * slotSize

	// reserveBatch is how many tokens one fsynced reservation covers.
	reserveBatch = 1024
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// fileRecord is the lock file's content.
type fileRecord struct {
	Name          string    `json:"name"`
	Holder        string    `json:"holder"`           // "" when free
	Token         uint64    `json:"token"`            // current or last token
	PID           int       `json:"pid,omitempty"`    // holder's process, for people
	Boot          string    `json:"boot"`             // boot id the expiry belongs to
	ExpiresMonoNS int64     `json:"expires_mono_ns"`  // CLOCK_MONOTONIC expiry; 0 when free
	TTLNS         int64     `json:"ttl_ns,omitempty"` // the TTL granted
	Written       time.Time `json:"written"`          // wall clock, for people only
}

// guardSlot is one of the guard file's two tenure slots: the last token
// issued and the tenure that holds it. Written on every acquisition, not
// fsynced: it is exact within a boot (every process reads the page cache).
type guardSlot struct {
	Seq    uint64 `json:"seq"`   // slot generation; the valid slot with the higher one wins
	Token  uint64 `json:"token"` // last token issued for the name
	Holder string `json:"holder"`
	PID    int    `json:"pid,omitempty"`
	TTLNS  int64  `json:"ttl_ns"`
	Boot   string `json:"boot"` // boot id of the acquisition
}

// reserveSlot is one of the guard file's two reservation slots: every token
// ever issued is at most Reserved. Written and fsynced before a token above
// the previous reservation is used, reserveBatch tokens at a time, so that
// tokens only grow across machine crashes while an acquisition rarely pays
// for an fsync.
type reserveSlot struct {
	Seq      uint64 `json:"seq"`
	Reserved uint64 `json:"reserved"`
}

// errFormat means bytes were not a valid record or slot.
var errFormat = errors.New("lease/file: bad format")

// encodeLine returns "<magic> <crc> <json>\n".
func encodeLine(magic string, v any) []byte {
	body, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("lease/file: marshal %T: %v", v, err)) // plain structs always marshal
	}
	var sum [4]byte
	c := crc32.Checksum(body, castagnoli)
	sum[0], sum[1], sum[2], sum[3] = byte(c>>24), byte(c>>16), byte(c>>8), byte(c)
	line := make([]byte, 0, len(magic)+10+len(body)+1)
	line = append(line, magic...)
	line = append(line, ' ')
	line = hex.AppendEncode(line, sum[:])
	line = append(line, ' ')
	line = append(line, body...)
	return append(line, '\n')
}

// decodeLine parses a line written by encodeLine into v. Anything else (an
// empty file, a truncated line, a bad checksum, garbage) is errFormat with
// the reason.
func decodeLine(magic string, data []byte, v any) error {
	if len(data) == 0 {
		return fmt.Errorf("%w: empty", errFormat)
	}
	line, _, ok := bytes.Cut(data, []byte{'\n'})
	if !ok {
		return fmt.Errorf("%w: no newline (truncated?)", errFormat)
	}
	rest, ok := bytes.CutPrefix(line, []byte(magic+" "))
	if !ok {
		return fmt.Errorf("%w: does not start with %q", errFormat, magic)
	}
	sumHex, body, ok := bytes.Cut(rest, []byte{' '})
	if !ok || len(sumHex) != 8 {
		return fmt.Errorf("%w: no checksum", errFormat)
	}
	var sum [4]byte
	if _, err := hex.Decode(sum[:], sumHex); err != nil {
		return fmt.Errorf("%w: checksum %q is not hex", errFormat, sumHex)
	}
	want := uint32(sum[0])<<24 | uint32(sum[1])<<16 | uint32(sum[2])<<8 | uint32(sum[3])
	if got := crc32.Checksum(body, castagnoli); got != want {
		return fmt.Errorf("%w: checksum %08x, want %08x", errFormat, got, want)
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("%w: %v", errFormat, err)
	}
	return nil
}

// encodeSlot returns a slot padded to slotSize with newlines.
func encodeSlot(magic string, s any) []byte {
	line := encodeLine(magic, s)
	if len(line) > slotSize {
		panic(fmt.Sprintf("lease/file: guard slot of %d bytes exceeds %d", len(line), slotSize))
	}
	return append(line, bytes.Repeat([]byte{'\n'}, slotSize-len(line))...)
}

// decodeSlots returns the valid slot with the highest sequence number among
// the two at the start of data, and whether there was one.
func decodeSlots[T any](data []byte, magic string, seq func(T) uint64) (T, bool) {
	var best T
	found := false
	for i := 0; i < 2; i++ {
		lo := i * slotSize
		if lo >= len(data) {
			break
		}
		var s T
		if decodeLine(magic, data[lo:min(lo+slotSize, len(data))], &s) != nil {
			continue
		}
		if !found || seq(s) > seq(best) {
			best, found = s, true
		}
	}
	return best, found
}
