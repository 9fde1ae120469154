package glovebox

import (
	"unicode"
	"unicode/utf8"

	"github.com/gloveboxhq/glovebox/internal/lookalike"
	"golang.org/x/text/unicode/norm"
)

// normText is a text normalized for matching (see normalize), with where
// each of its bytes came from: byte i stands for the original's bytes
// from lo[i] up to where the next byte's character begins.
type normText struct {
	text string
	lo   []int32
	n    int // the original's length
}

// pos is where the normalized text's bytes [i, j) came from in the
// original.
func (t *normText) pos(i, j int) (int, int) {
	last := t.lo[j-1]
	for k := j; k < len(t.lo); k++ {
		if t.lo[k] != last {
			return int(t.lo[i]), int(t.lo[k])
		}
	}
	return int(t.lo[i]), t.n
}

// normalize returns s with its look-alike characters spelled in the
// ASCII they look like, or nil when s has none (ASCII text never has):
// compatibility forms decomposed (NFKD: full-width ａ, mathematical 𝐚,
// circled ⓐ, ligatures), combining marks and format characters (zero
// width joiners, soft hyphens) dropped, and characters Unicode's
// confusables data says look like an ASCII one (Cyrillic а, Greek ο,
// other scripts' decimal digits) replaced by it (internal/lookalike).
// Characters it does not know stay as they are. It costs time in the
// length of s, and 4 bytes of offsets per byte when s is not ASCII.
func normalize(s string) *normText {
	first := 0
	for first < len(s) && s[first] < utf8.RuneSelf {
		first++
	}
	if first == len(s) {
		return nil
	}
	if first > 0 {
		first-- // an ASCII letter before a combining mark is its base
	}
	b := make([]byte, first, len(s)+8)
	copy(b, s[:first])
	lo := make([]int32, first, cap(b))
	for i := range first {
		lo[i] = int32(i)
	}
	var seg []byte
	changed := false
	for i := first; i < len(s); {
		if s[i] < utf8.RuneSelf && (i+1 == len(s) || s[i+1] < utf8.RuneSelf) {
			b, lo = append(b, s[i]), append(lo, int32(i))
			i++
			continue
		}
		n := norm.NFKD.NextBoundaryInString(s[i:], true)
		if n <= 0 {
			n = len(s) - i
		}
		seg = norm.NFKD.AppendString(seg[:0], s[i:i+n])
		before := len(b)
		for k := 0; k < len(seg); {
			r, size := utf8.DecodeRune(seg[k:])
			k += size
			switch {
			case r < utf8.RuneSelf:
				b = append(b, byte(r))
			case unicode.In(r, unicode.Mn, unicode.Me, unicode.Cf):
			default:
				if a, ok := lookalike.ASCII(r); ok {
					b = append(b, a...)
				} else {
					b = utf8.AppendRune(b, r)
				}
			}
		}
		for range len(b) - before {
			lo = append(lo, int32(i))
		}
		if !changed && string(b[before:]) != s[i:i+n] {
			changed = true
		}
		i += n
	}
	if !changed {
		return nil
	}
	return &normText{text: string(b), lo: lo, n: len(s)}
}
