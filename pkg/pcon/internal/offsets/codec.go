package offsets

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"strings"
)

// MaxMetadata is the largest commit metadata pcon writes. Brokers reject
// larger metadata (offset.metadata.max.bytes defaults to 4096), and a
// rejected commit would stall progress, so the encoder truncates instead.
// A broker configured below it is met with ShorterLimit.
const MaxMetadata = 4000

// The metadata format is "pcon1" + kind + ":" + base64url(raw), where raw is
// the uvarint commit offset the metadata belongs to followed by the payload.
// Storing the offset lets the decoder reject metadata that no longer matches
// the committed offset (for example after an operator reset the group).
const (
	magic   = "pcon1"
	kindRLE = 'r'
	kindBit = 'b'
)

var b64 = base64.RawURLEncoding

// ErrForeign reports metadata that pcon did not write: empty, from another
// tool, or corrupt.
var ErrForeign = errors.New("offsets: metadata not written by pcon")

// Encode returns commit metadata for commit offset base and the completed
// offsets above it (ascending, each >= base). RLE and bitset encodings are
// both computed and the shorter wins. If neither fits in limit bytes the
// lowest offsets are dropped until one fits: they are the oldest work, and
// reprocessing them after a restart is the cheapest loss. kept reports how
// many of the highest offsets the metadata still carries.
func Encode(base int64, done []int64, limit int) (meta string, kept int) {
	if len(done) == 0 {
		return "", 0
	}
	if m := encodeShortest(base, done); len(m) <= limit {
		return m, len(done)
	}
	// Encoded size shrinks as offsets are dropped from the low end, so a
	// binary search finds the fewest drops that fit.
	drop := sort.Search(len(done), func(k int) bool {
		return len(encodeShortest(base, done[k:])) <= limit
	})
	if drop == len(done) {
		return "", 0
	}
	return encodeShortest(base, done[drop:]), len(done) - drop
}

func encodeShortest(base int64, done []int64) string {
	rle := encodeRLE(base, done)
	bits := encodeBits(base, done)
	if len(bits) < len(rle) {
		return wrap(kindBit, base, bits)
	}
	return wrap(kindRLE, base, rle)
}

func wrap(kind byte, base int64, payload []byte) string {
	raw := binary.AppendUvarint(make([]byte, 0, len(payload)+10), uint64(base))
	raw = append(raw, payload...)
	var sb strings.Builder
	sb.Grow(len(magic) + 2 + b64.EncodedLen(len(raw)))
	sb.WriteString(magic)
	sb.WriteByte(kind)
	sb.WriteByte(':')
	sb.WriteString(b64.EncodeToString(raw))
	return sb.String()
}

// encodeRLE writes alternating (skip, run) uvarint pairs: skip offsets that
// are not complete, then run offsets that are.
func encodeRLE(base int64, done []int64) []byte {
	var out []byte
	pos := base
	for i := 0; i < len(done); {
		j := i + 1
		for j < len(done) && done[j] == done[j-1]+1 {
			j++
		}
		out = binary.AppendUvarint(out, uint64(done[i]-pos))
		out = binary.AppendUvarint(out, uint64(j-i))
		pos = done[j-1] + 1
		i = j
	}
	return out
}

// encodeBits writes the distance of the first offset from base, then one bit
// per offset from there to the last, least significant bit first.
func encodeBits(base int64, done []int64) []byte {
	first := done[0]
	span := done[len(done)-1] - first + 1
	out := binary.AppendUvarint(nil, uint64(first-base))
	bits := make([]byte, (span+7)/8)
	for _, o := range done {
		r := o - first
		bits[r/8] |= 1 << (r % 8)
	}
	return append(out, bits...)
}

// Decode parses metadata written by Encode and returns the commit offset it
// was written for and the completed offsets above it. Anything else yields
// an error wrapping ErrForeign.
func Decode(meta string) (base int64, done []int64, err error) {
	if len(meta) < len(magic)+2 || !strings.HasPrefix(meta, magic) || meta[len(magic)+1] != ':' {
		return 0, nil, ErrForeign
	}
	kind := meta[len(magic)]
	raw, err := b64.DecodeString(meta[len(magic)+2:])
	if err != nil {
		return 0, nil, fmt.Errorf("%w: %w", ErrForeign, err)
	}
	ub, n := binary.Uvarint(raw)
	if n <= 0 || ub > 1<<62 {
		return 0, nil, fmt.Errorf("%w: bad base offset", ErrForeign)
	}
	base = int64(ub)
	payload := raw[n:]
	switch kind {
	case kindRLE:
		done, err = decodeRLE(base, payload)
	case kindBit:
		done, err = decodeBits(base, payload)
	default:
		err = fmt.Errorf("%w: unknown kind %q", ErrForeign, kind)
	}
	if err != nil {
		return 0, nil, err
	}
	return base, done, nil
}

// maxDecoded bounds what garbage can make the decoder allocate: metadata of
// at most a few KB cannot honestly describe more offsets than this.
const maxDecoded = 8 * 4096 * 8

func decodeRLE(base int64, p []byte) ([]int64, error) {
	var done []int64
	pos := base
	for len(p) > 0 {
		skip, n := binary.Uvarint(p)
		if n <= 0 {
			return nil, fmt.Errorf("%w: bad skip", ErrForeign)
		}
		p = p[n:]
		run, n := binary.Uvarint(p)
		if n <= 0 || run == 0 || skip > 1<<40 || uint64(len(done))+run > maxDecoded {
			return nil, fmt.Errorf("%w: bad run", ErrForeign)
		}
		p = p[n:]
		pos += int64(skip)
		for range run {
			done = append(done, pos)
			pos++
		}
	}
	return done, nil
}

func decodeBits(base int64, p []byte) ([]int64, error) {
	first, n := binary.Uvarint(p)
	if n <= 0 || first > 1<<40 {
		return nil, fmt.Errorf("%w: bad bitset start", ErrForeign)
	}
	var done []int64
	for i, b := range p[n:] {
		for bit := range 8 {
			if b&(1<<bit) != 0 {
				done = append(done, base+int64(first)+int64(i*8+bit))
			}
		}
	}
	return done, nil
}

// minLimit is the smallest metadata limit worth trying: below it hardly an
// offset fits, so the next step is no metadata at all.
const minLimit = 64

// ShorterLimit is the limit to try after a broker refused metadata of size
// bytes as too large: half of it, or 0 (no metadata) once that is too
// small to carry anything. Halving finds any broker limit in a few steps
// while keeping at least half of what the broker would have taken.
func ShorterLimit(size int) int {
	if l := size / 2; l >= minLimit {
		return l
	}
	return 0
}

// Reencode returns meta, metadata written by Encode, encoded again within
// limit bytes, dropping its lowest offsets as Encode does. Metadata it
// cannot decode yields "".
func Reencode(meta string, limit int) string {
	base, done, err := Decode(meta)
	if err != nil {
		return ""
	}
	m, _ := Encode(base, done, limit)
	return m
}
