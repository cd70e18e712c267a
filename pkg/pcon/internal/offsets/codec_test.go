package offsets

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestCodecPicksShorter(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		done []int64
		kind byte
	}{
		{name: "long runs favour RLE", done: seq(101, 5000), kind: kindRLE},
		{name: "alternating offsets favour the bitset", done: every(101, 2, 2000), kind: kindBit},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			meta, kept := Encode(100, tt.done, MaxMetadata)
			if kept != len(tt.done) {
				t.Fatalf("kept %d of %d", kept, len(tt.done))
			}
			if meta[len(magic)] != tt.kind {
				t.Errorf("kind = %q, want %q", meta[len(magic)], tt.kind)
			}
			base, got, err := Decode(meta)
			if err != nil {
				t.Fatal(err)
			}
			if base != 100 {
				t.Errorf("base = %d", base)
			}
			if diff := cmp.Diff(tt.done, got); diff != "" {
				t.Errorf("round trip (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDecodeForeign(t *testing.T) {
	t.Parallel()
	for name, meta := range map[string]string{
		"empty":        "",
		"other tool":   "consumer-xyz:v1",
		"bad base64":   "pcon1r:!!!",
		"unknown kind": "pcon1z:AA",
		"truncated":    "pcon1r:",
		"bad run":      "pcon1r:" + b64.EncodeToString([]byte{1, 5, 0}),
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if _, _, err := Decode(meta); !errors.Is(err, ErrForeign) {
				t.Fatalf("Decode(%q) err = %v, want ErrForeign", meta, err)
			}
		})
	}
}

func TestEncodeTruncatesOldest(t *testing.T) {
	t.Parallel()
	// Every third offset defeats RLE and spreads the bitset far enough that
	// neither fits, forcing truncation.
	done := every(1, 3, 60000)
	meta, kept := Encode(0, done, MaxMetadata)
	if len(meta) > MaxMetadata {
		t.Fatalf("len = %d", len(meta))
	}
	if kept == 0 || kept == len(done) {
		t.Fatalf("kept = %d of %d, want a truncated suffix", kept, len(done))
	}
	_, got, err := Decode(meta)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(done[len(done)-kept:], got); diff != "" {
		t.Errorf("kept suffix (-want +got):\n%s", diff)
	}
}

func TestShorterLimit(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		size int
		want int
	}{
		{name: "halves", size: 4000, want: 2000},
		{name: "halves an odd size down", size: 2671, want: 1335},
		{name: "smallest worth trying", size: 2 * minLimit, want: minLimit},
		{name: "too small to carry anything: none", size: 2*minLimit - 1, want: 0},
		{name: "nothing stays nothing", size: 0, want: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := ShorterLimit(tt.size); got != tt.want {
				t.Errorf("ShorterLimit(%d) = %d, want %d", tt.size, got, tt.want)
			}
		})
	}
}

func TestReencode(t *testing.T) {
	t.Parallel()
	done := every(1, 3, 3000) // 2 bytes an offset in RLE, 3/8 in the bitset
	full, _ := Encode(0, done, MaxMetadata)
	tests := []struct {
		name  string
		meta  string
		limit int
		want  string // how many offsets of done remain: "all", "some" (the highest) or "none"
	}{
		{name: "fits already: unchanged", meta: full, limit: MaxMetadata, want: "all"},
		{name: "shorter keeps the highest", meta: full, limit: len(full) / 2, want: "some"},
		{name: "no room: none", meta: full, limit: 0, want: "none"},
		{name: "foreign: none", meta: "consumer-xyz:v1", limit: MaxMetadata, want: "none"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := Reencode(tt.meta, tt.limit)
			if len(got) > tt.limit {
				t.Fatalf("len %d > limit %d", len(got), tt.limit)
			}
			if got == "" {
				if tt.want != "none" {
					t.Fatalf("Reencode = none, want %s", tt.want)
				}
				return
			}
			base, kept, err := Decode(got)
			if err != nil || base != 0 {
				t.Fatalf("Decode = %d, %v", base, err)
			}
			var remain string
			switch {
			case len(kept) == len(done):
				remain = "all"
			case len(kept) > 0 && len(kept) < len(done):
				remain = "some"
			default:
				t.Fatalf("kept %d of %d offsets", len(kept), len(done))
			}
			if remain != tt.want {
				t.Errorf("kept %s (%d) of the offsets, want %s", remain, len(kept), tt.want)
			}
			if diff := cmp.Diff(done[len(done)-len(kept):], kept); diff != "" {
				t.Errorf("kept are not the highest (-want +got):\n%s", diff)
			}
		})
	}
}

// FuzzCodec checks that whatever the completed set, the metadata fits the
// limit, decodes to the highest offsets of the set, and that arbitrary
// input never makes Decode panic.
func FuzzCodec(f *testing.F) {
	f.Add(int64(0), []byte{1, 2, 3}, uint16(4000))
	f.Add(int64(1<<40), []byte{0, 0, 255, 7}, uint16(40))
	f.Add(int64(7), []byte(strings.Repeat("\x01\x09", 3000)), uint16(4000))
	f.Fuzz(func(t *testing.T, base int64, steps []byte, limit uint16) {
		if base < 0 || base > 1<<50 {
			base = 0
		}
		done := make([]int64, 0, len(steps))
		pos := base
		for _, s := range steps {
			pos += int64(s%32) + 1
			done = append(done, pos)
		}
		lim := int(limit)%MaxMetadata + 1
		meta, kept := Encode(base, done, lim)
		if len(meta) > lim {
			t.Fatalf("len %d > limit %d", len(meta), lim)
		}
		if kept == 0 {
			if meta != "" {
				t.Fatalf("kept nothing but meta %q", meta)
			}
			return
		}
		gotBase, got, err := Decode(meta)
		if err != nil {
			t.Fatal(err)
		}
		if gotBase != base {
			t.Fatalf("base %d, want %d", gotBase, base)
		}
		if diff := cmp.Diff(done[len(done)-kept:], got); diff != "" {
			t.Fatalf("round trip (-want +got):\n%s", diff)
		}
		_, _, _ = Decode(string(steps))
		_, _, _ = Decode(magic + "r:" + b64.EncodeToString(steps))
		_, _, _ = Decode(magic + "b:" + b64.EncodeToString(steps))
	})
}

func seq(from int64, n int) []int64 { return every(from, 1, n) }

func every(from, step int64, n int) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = from + int64(i)*step
	}
	return out
}
