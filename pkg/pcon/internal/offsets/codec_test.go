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
