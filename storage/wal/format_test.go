package wal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"coord/raft"
)

// segmentBytes builds segment seq holding the given batches, each a list of
// entries followed by an optional hard state.
func segmentBytes(seq uint64, batches ...[]raft.Entry) []byte {
	data := segmentHeader(seq)
	for _, ents := range batches {
		b := newBatch(nil, seq, int64(len(data)))
		for _, e := range ents {
			b.entry(e)
		}
		b.hardState(raft.HardState{Term: 1, Commit: 1})
		data = append(data, b.finish()...)
	}
	return data
}

func entries(first, n uint64, term uint64) []raft.Entry {
	var ents []raft.Entry
	for i := range n {
		ents = append(ents, raft.Entry{Term: term, Index: first + i, Data: []byte(fmt.Sprintf("entry %d", first+i))})
	}
	return ents
}

func TestParseSegmentRoundTrip(t *testing.T) {
	data := segmentBytes(1, entries(1, 3, 1), entries(4, 2, 1))
	for _, last := range []bool{false, true} {
		s, err := parseSegment(data, 1, last)
		if err != nil {
			t.Fatal(err)
		}
		if s.torn || s.end != int64(len(data)) || len(s.records) != 7 {
			t.Fatalf("last=%v: torn=%v end=%d records=%d, want a clean 7-record segment of %d bytes",
				last, s.torn, s.end, len(s.records), len(data))
		}
	}
}

// TestParseSegmentEveryCut cuts the last segment at every length: each cut
// is a torn tail that recovers exactly the complete batches before it.
func TestParseSegmentEveryCut(t *testing.T) {
	data := segmentBytes(1, entries(1, 2, 1), entries(3, 1, 1), entries(4, 3, 2))
	full, err := parseSegment(data, 1, true)
	if err != nil {
		t.Fatal(err)
	}
	// The ends of the batches: after the header, and after each hard state.
	ends := []int64{segmentHeaderSize}
	for _, r := range full.records {
		if r.typ == recordHardState {
			ends = append(ends, r.offset+recordHeaderSize+hardStateSize)
		}
	}
	for cut := 0; cut <= len(data); cut++ {
		for _, zeros := range []int{0, 7, 100} {
			torn := append(bytes.Clone(data[:cut]), make([]byte, zeros)...)
			s, err := parseSegment(torn, 1, true)
			if err != nil {
				t.Fatalf("cut %d + %d zeros: %v", cut, zeros, err)
			}
			// The last batch end up to which the torn bytes equal the
			// written ones (zeros can complete a record that ends in zeros).
			want := int64(0)
			for _, e := range ends {
				if e <= int64(len(torn)) && bytes.Equal(torn[:e], data[:e]) {
					want = e
				}
			}
			if s.end != want {
				t.Fatalf("cut %d + %d zeros: end %d, want %d", cut, zeros, s.end, want)
			}
			// A header cut short is torn even if the file is empty. Zeros
			// after a complete batch are allocated space, not a tear.
			zeroTail := want > 0 && !bytes.ContainsFunc(torn[want:], func(r rune) bool { return r != 0 })
			if s.torn != !zeroTail {
				t.Fatalf("cut %d + %d zeros: torn=%v with end %d of %d", cut, zeros, s.torn, s.end, len(torn))
			}
			// The same bytes in a segment that is not the last are corrupt,
			// a zero tail too: it may only follow an end-of-segment record.
			if s.torn || int64(len(torn)) > want {
				if _, err := parseSegment(torn, 1, false); !errors.Is(err, ErrCorrupt) {
					t.Fatalf("cut %d in a non-last segment: %v, want ErrCorrupt", cut, err)
				}
			}
		}
	}
}

// TestParseSegmentEveryBitFlip flips every bit of a segment: the result is
// an error, or a torn tail whose valid prefix ends before the flipped byte.
// A flip never yields records that were not written.
func TestParseSegmentEveryBitFlip(t *testing.T) {
	data := segmentBytes(1, entries(1, 2, 1), entries(3, 1, 1))
	for i := range len(data) * 8 {
		flipped := bytes.Clone(data)
		flipped[i/8] ^= 1 << (i % 8)
		s, err := parseSegment(flipped, 1, true)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrUnsupported) {
				t.Fatalf("bit %d: %v, want ErrCorrupt or ErrUnsupported", i, err)
			}
			continue
		}
		if !s.torn || s.end > int64(i/8) {
			t.Fatalf("bit %d: parsed without error, torn=%v end=%d", i, s.torn, s.end)
		}
	}
}

func TestBadRecordFollowedByValidIsCorrupt(t *testing.T) {
	data := segmentBytes(1, entries(1, 1, 1), entries(2, 1, 1), entries(3, 1, 1))
	data[segmentHeaderSize+recordHeaderSize+3] ^= 0xff // the first entry's payload
	_, err := parseSegment(data, 1, true)
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "a valid record follows") {
		t.Fatalf("got %v, want ErrCorrupt saying a valid record follows", err)
	}
}

func TestSegmentHeaderErrors(t *testing.T) {
	good := segmentBytes(7, entries(1, 1, 1))
	rehash := func(h []byte) {
		binary.LittleEndian.PutUint32(h[24:], crc32.Checksum(h[:24], castagnoli))
	}
	tests := []struct {
		name   string
		change func(b []byte)
		want   error
		text   string
	}{
		{"bad magic", func(b []byte) { copy(b, "NOTAWAL!") }, ErrCorrupt, "bad magic"},
		{"newer version", func(b []byte) { b[8] = 2; rehash(b) }, ErrUnsupported, "version 2"},
		{"header checksum", func(b []byte) { b[24] ^= 1 }, ErrCorrupt, "header checksum"},
		{"sequence number", func(b []byte) { b[16] = 8; rehash(b) }, ErrCorrupt, "sequence number 8"},
		{"reserved bytes", func(b []byte) { b[12] = 1; rehash(b) }, ErrCorrupt, "reserved"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, last := range []bool{false, true} {
				data := bytes.Clone(good)
				tt.change(data)
				_, err := parseSegment(data, 7, last)
				if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.text) {
					t.Fatalf("last=%v: got %v, want %v mentioning %q", last, err, tt.want, tt.text)
				}
			}
		})
	}
	if _, err := parseSegment(good[:10], 7, false); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("short header in a non-last segment: %v, want ErrCorrupt", err)
	}
}

// craftRecord returns segment seq with one record of any type and flags,
// with valid checksums.
func craftRecord(seq uint64, typ recordType, flags byte, payload []byte) []byte {
	b := newBatch(nil, seq, segmentHeaderSize)
	b.record(typ, func(p []byte) []byte { return append(p, payload...) })
	b.seal(0, flags)
	return append(segmentHeader(seq), b.buf...)
}

func TestIntactButWrongRecords(t *testing.T) {
	tests := []struct {
		name string
		data []byte
		want error
		text string
	}{
		{"unknown type", craftRecord(1, 9, flagBatchEnd, nil), ErrUnsupported, "unknown record type 9"},
		{"unknown flags", craftRecord(1, recordHardState, 0x81, make([]byte, hardStateSize)), ErrUnsupported, "flags"},
		{"short hard state", craftRecord(1, recordHardState, flagBatchEnd, make([]byte, 5)), ErrCorrupt, "want 24"},
		{"short entry", craftRecord(1, recordEntry, flagBatchEnd, make([]byte, 5)), ErrCorrupt, "at least 17"},
		{"long checkpoint", craftRecord(1, recordCheckpoint, flagBatchEnd, make([]byte, 21)), ErrCorrupt, "want 20"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parseSegment(tt.data, 1, true)
			if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.text) {
				t.Fatalf("got %v, want %v mentioning %q", err, tt.want, tt.text)
			}
		})
	}
}

func TestRecordOnlyValidWhereWritten(t *testing.T) {
	// A record copied to another offset (or another segment) fails its
	// header checksum: the position is part of it.
	data := segmentBytes(1, entries(1, 1, 1))
	rec := data[segmentHeaderSize:]
	if _, ok := validRecordAfter(append(segmentHeader(1), append([]byte{0}, rec...)...), 1, segmentHeaderSize); ok {
		t.Fatal("a record shifted by one byte passed as valid")
	}
	if _, ok := validRecordAfter(append(segmentHeader(2), rec...), 2, segmentHeaderSize); ok {
		t.Fatal("a record copied into another segment passed as valid")
	}
	if off, ok := validRecordAfter(data, 1, segmentHeaderSize); !ok || off != segmentHeaderSize {
		t.Fatalf("the record where it was written: found=%v at %d", ok, off)
	}
}

var writeCorpus = flag.Bool("write-corpus", false, "rewrite the seed corpus in testdata/fuzz/FuzzParseSegment")

// TestWriteFuzzCorpus regenerates the seed corpus when run with
// -write-corpus; otherwise it checks that the corpus exists.
func TestWriteFuzzCorpus(t *testing.T) {
	dir := filepath.Join("testdata", "fuzz", "FuzzParseSegment")
	if !*writeCorpus {
		names, err := os.ReadDir(dir)
		if err != nil || len(names) == 0 {
			t.Fatalf("seed corpus %s missing (%v): run go test -run TestWriteFuzzCorpus -write-corpus", dir, err)
		}
		return
	}
	valid := segmentBytes(1, entries(1, 2, 1), entries(3, 1, 2))
	corrupt := bytes.Clone(valid)
	corrupt[segmentHeaderSize+20] ^= 4
	seeds := map[string][]byte{
		"empty":          nil,
		"header":         segmentHeader(1),
		"valid":          valid,
		"torn":           valid[:len(valid)-5],
		"zero-tail":      append(bytes.Clone(valid), make([]byte, 40)...),
		"corrupt-middle": corrupt,
		"unknown-type":   craftRecord(1, 9, flagBatchEnd, []byte("x")),
		"checkpoint":     craftRecord(1, recordCheckpoint, flagBatchEnd, make([]byte, checkpointSize)),
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, data := range seeds {
		for _, last := range []bool{false, true} {
			body := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\nbool(%v)\n", data, last)
			file := filepath.Join(dir, fmt.Sprintf("%s-last-%v", name, last))
			if err := os.WriteFile(file, []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// FuzzParseSegment checks that no input makes the decoder panic, that a
// torn tail's valid prefix parses cleanly on its own, and that replaying
// what it returns does not panic.
func FuzzParseSegment(f *testing.F) {
	f.Add(segmentBytes(1, entries(1, 2, 1)), true)
	f.Fuzz(func(t *testing.T, data []byte, last bool) {
		s, err := parseSegment(data, 1, last)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrUnsupported) {
				t.Fatalf("error wraps neither ErrCorrupt nor ErrUnsupported: %v", err)
			}
			return
		}
		if s.end > int64(len(data)) || (!s.torn && zeroTailStart(data) > max(s.end, segmentHeaderSize)) || (s.torn && !last) {
			t.Fatalf("end %d of %d bytes, torn=%v, last=%v", s.end, len(data), s.torn, last)
		}
		if s.end >= segmentHeaderSize {
			again, err := parseSegment(data[:s.end], 1, false)
			if err != nil || again.torn || len(again.records) != len(s.records) {
				t.Fatalf("the valid prefix does not parse cleanly: %v, torn=%v, %d vs %d records",
					err, again.torn, len(again.records), len(s.records))
			}
		}
		var state State
		_ = state.replay(s.records)
	})
}
