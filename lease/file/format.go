//go:build linux

package file

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"strconv"
	"strings"
	"time"
)

// The on-disk formats are described in the package doc (doc.go). A record
// file, the lock file and each reservation slot are one line:
//
//	<magic> <crc32c of json, 8 hex digits> <json>\n

const (
	recordMagic  = "coord-lease/v2"
	reserveMagic = "coord-reserve/v1"
	slotSize     = 1024 // bytes per reservation slot
	maxHolder    = 512  // bytes; keeps a record well under maxRecordSize

	// maxRecordSize bounds what is read of a record file: a longer file is
	// damage, never a record.
	maxRecordSize = 4096

	// reserveAheadUS is how far beyond a token issued ahead of the wall
	// clock a reservation reaches, in microseconds (one second), so that
	// a clock set back costs one fsync a second at most.
	reserveAheadUS = 1_000_000

	// keepVersions is how many record versions below a new one are kept:
	// an operation in flight reads one of them as its predecessor, and
	// removing it early only makes that operation start over.
	keepVersions = 16

	// maxVersion bounds version numbers: a file named beyond it is damage.
	maxVersion = 1 << 62
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// fileRecord is one version of a lease's record: the content of a record
// file (DIR/.NAME.vVERSION), and of the lock file (DIR/NAME), a copy of the
// current version for people.
type fileRecord struct {
	Name          string    `json:"name"`
	Version       uint64    `json:"version"`          // the number in its file name
	ID            string    `json:"id"`               // random; names this version
	Prev          string    `json:"prev,omitempty"`   // ID of the version it replaced
	Holder        string    `json:"holder"`           // "" when free
	Token         uint64    `json:"token"`            // current or last token
	PID           int       `json:"pid,omitempty"`    // holder's process, for people
	Boot          string    `json:"boot"`             // boot id the expiry belongs to
	NetNS         uint64    `json:"netns,omitempty"`  // network namespace of the tenure socket
	Socket        string    `json:"socket,omitempty"` // the tenure socket's abstract name (without NUL)
	ExpiresMonoNS int64     `json:"expires_mono_ns"`  // CLOCK_MONOTONIC expiry; 0 when free
	TTLNS         int64     `json:"ttl_ns,omitempty"` // the TTL granted
	Written       time.Time `json:"written"`          // wall clock, for people only
}

// reserveSlot is one of the reservation file's two slots: every token ever
// issued ahead of the wall clock is at most Reserved. Written and fsynced
// before such a token is used; see the package doc.
type reserveSlot struct {
	Seq      uint64 `json:"seq"`
	Reserved uint64 `json:"reserved"`
}

// errFormat means bytes were not a valid record or slot.
var errFormat = errors.New("lease/file: bad format")

// versionFile returns the name of the record file of version n of name.
func versionFile(name string, n uint64) string {
	return "." + name + ".v" + strconv.FormatUint(n, 10)
}

// parseVersionFile returns the version number of a directory entry that
// is a record file of name. Only "." + name + ".v" followed by digits
// matches, so the files of a lease named "NAME.vX" never do.
func parseVersionFile(name, entry string) (uint64, bool) {
	digits, ok := strings.CutPrefix(entry, "."+name+".v")
	if !ok || digits == "" || strings.Trim(digits, "0123456789") != "" {
		return 0, false
	}
	n, err := strconv.ParseUint(digits, 10, 64)
	if err != nil || n == 0 {
		return 0, false
	}
	return n, true
}

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

// decodeRecord parses the record file of version n of name and checks that
// it says what its name says.
func decodeRecord(name string, n uint64, data []byte) (fileRecord, error) {
	var r fileRecord
	if err := decodeLine(recordMagic, data, &r); err != nil {
		return r, err
	}
	switch {
	case r.Name != name:
		return r, fmt.Errorf("%w: record names lease %q", errFormat, r.Name)
	case r.Version != n:
		return r, fmt.Errorf("%w: record says version %d, its file name %d", errFormat, r.Version, n)
	case r.ID == "":
		return r, fmt.Errorf("%w: record has no id", errFormat)
	case r.Holder != "" && r.Token == 0:
		return r, fmt.Errorf("%w: holder %q without a token", errFormat, r.Holder)
	}
	return r, nil
}

// encodeSlot returns a slot padded to slotSize with newlines.
func encodeSlot(magic string, s any) []byte {
	line := encodeLine(magic, s)
	if len(line) > slotSize {
		panic(fmt.Sprintf("lease/file: slot of %d bytes exceeds %d", len(line), slotSize))
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
