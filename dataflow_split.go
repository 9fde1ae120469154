package glovebox

import (
	"index/suffixarray"
	"math"
	"math/big"
	"strconv"
	"strings"
)

// numberText is the decimal form of a number the guest sent or
// returned — an Integer, a bignum, a Float (4111111111111111.0 is
// "4111111111111111": no fraction, no exponent) — and false for
// anything else (NaN and the infinities included).
func numberText(v any) (string, bool) {
	switch x := v.(type) {
	case int64:
		return strconv.FormatInt(x, 10), true
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return "", false
		}
		return strconv.FormatFloat(x, 'f', -1, 64), true
	case *big.Int:
		if x != nil {
			return x.String(), true
		}
	}
	return "", false
}

// joinScalars joins the text of a list of strings and numbers (numbers
// in their decimal form) and returns where each element after the first
// begins in it; ok is false for a list of fewer than two elements or
// with anything else in it.
func joinScalars(x []any) (s string, cuts []int, ok bool) {
	if len(x) < 2 {
		return "", nil, false
	}
	var b strings.Builder
	for i, e := range x {
		if i > 0 {
			cuts = append(cuts, b.Len())
		}
		switch c := e.(type) {
		case string:
			b.WriteString(c)
		default:
			t, ok := numberText(e)
			if !ok {
				return "", nil, false
			}
			b.WriteString(t)
		}
	}
	return b.String(), cuts, true
}

// crossing reports whether s, a list's elements joined, spells a
// labelled value across one of cuts (where an element begins). It
// searches s around each cut only, as far on either side as four times
// the longest spelling looked for: a value spelled with more separators
// than that between its characters is not seen across two elements.
func (f *flowState) crossing(s string, cuts []int) bool {
	w := 4 * f.longest
	for i := 0; i < len(cuts); {
		lo, hi := max(0, cuts[i]-w), min(len(s), cuts[i]+w)
		j := i + 1
		for j < len(cuts) && cuts[j]-w < hi { // windows that overlap: one
			hi = min(len(s), cuts[j]+w)
			j++
		}
		for _, sp := range f.find(s[lo:hi]) {
			for _, c := range cuts[i:j] {
				if lo+sp.lo < c && c < lo+sp.hi {
					return true
				}
			}
		}
		i = j
	}
	return false
}

// splitTexts gathers the forms of every text a sink check searched (each
// string of a call, a Hash key, a keyword's name, a number's digits, and
// their decoded, reversed and normalized variants), to look for a value
// whose parts are spread over them: skel and nums hold the letters and
// digits forms, and the digits forms, "\x00" between texts.
type splitTexts struct {
	skel, nums []byte
	seen       map[string]bool
}

func (c *splitTexts) add(t *forms) {
	if c.seen == nil {
		c.seen = map[string]bool{}
	}
	for _, p := range []struct {
		dst  *[]byte
		text string
	}{{&c.skel, t.skelFolded}, {&c.nums, t.nums.text}} {
		if p.text == "" || c.seen[p.text] {
			continue
		}
		c.seen[p.text] = true
		*p.dst = append(append(*p.dst, p.text...), 0)
	}
}

// partLen is the shortest part of a value the split check looks for in
// text of n bytes over an alphabet of a characters (36 for letters and
// digits, 16 for hex, 10 for digits): long enough that such text holds
// a given part by chance less than about once in a hundred, and never
// under four. It is ceil(log_a n) + 2: 4 letters up to 1,296 bytes of
// text, 5 up to 46,656; 4 digits up to 100 bytes, 6 up to 10,000.
func partLen(n, a int) int {
	m := 2
	for p := 1; p < n; p *= a {
		m++
	}
	return max(4, m)
}

// finder tells whether a text holds a string: with strings.Contains
// until it has searched the text budget times over, then through a
// suffix array of the text it builds then (time and 4 bytes of memory
// per byte of text, once). The split check sets the budget at a few
// searches per spelling it looks for, what text that holds no part of a
// value needs (the first and last part of each), so the array is built
// only for text that holds many values' first and last parts; the check
// then costs time linear in the text, not in the text times the values'
// lengths.
type finder struct {
	text   string
	budget int // searches of the whole text left before the suffix array
	sa     *suffixarray.Index
}

func (f *finder) has(s string) bool {
	if f.sa != nil {
		return len(f.sa.Lookup([]byte(s), 1)) > 0
	}
	if f.budget--; f.budget < 0 {
		f.sa = suffixarray.New([]byte(f.text))
	}
	return strings.Contains(f.text, s)
}

// covers reports whether the text holds all of needle in parts of m
// bytes or more (overlapping or not, in any order): each byte of needle
// lies in a substring of needle of m bytes or more that the text
// contains. It walks needle once, keeping for each end the longest
// substring ending there that the text contains (which starts no
// earlier than the one before it), so it asks at most twice per byte of
// needle, and once or twice when the text holds neither needle's first
// nor its last m bytes.
func covers(text *finder, needle string, m int) bool {
	n := len(needle)
	if n <= m || !text.has(needle[:m]) || !text.has(needle[n-m:]) {
		return false
	}
	done, s := 0, 0 // needle[:done] is covered; needle[s:e] is in the text
	for e := 1; e <= n; e++ {
		for s < e && !text.has(needle[s:e]) {
			s++
		}
		if s > done {
			return false // nothing starting at or before done reaches past it
		}
		if e-s >= m {
			done = e
		}
	}
	return done == n
}

// split looks for a labelled value of a kind p does not accept whose
// parts are spread over the texts c gathered, in its letters-and-digits
// form, in hex, as its byte codes or as a number's digits; it returns
// the entry and how it was spelled.
func (f *flowState) split(c *splitTexts, accepts func(Kind) bool) (*entry, string) {
	spellings := 0
	for _, e := range f.all {
		if !accepts(e.kind) {
			spellings += 3 + len(e.hexes) + len(e.digits)
		}
	}
	skel, nums := &finder{string(c.skel), 2*spellings + 16, nil}, &finder{string(c.nums), 2*spellings + 16, nil}
	ms, mh, mn := partLen(len(skel.text), 36), partLen(len(skel.text), 16), partLen(len(nums.text), 10)
	for _, e := range f.all {
		if accepts(e.kind) {
			continue
		}
		for _, sk := range []string{e.skel, e.nskel} {
			if sk != "" && covers(skel, sk, ms) {
				return e, "in any case, spacing or punctuation"
			}
		}
		for _, h := range e.hexes {
			if covers(skel, h, mh) {
				return e, "in hex"
			}
		}
		if e.codes != "" && covers(nums, e.codes, mn) {
			return e, "as its character codes"
		}
		for _, d := range e.digits {
			if covers(nums, d, mn) {
				return e, "as its digits"
			}
		}
	}
	return nil, ""
}

// uudecoded returns what the runs of uuencode characters (ASCII 32 to
// 96) of 12 or more in s decode to, each decoded at the four offsets a
// group of four can start at (after a line's length character or not),
// a newline between: [e].pack("u") decodes to e. It is "" when s has no
// such run.
func uudecoded(s string) string {
	var b []byte
	for i := 0; i < len(s); {
		if s[i] < 0x20 || s[i] > 0x60 {
			i++
			continue
		}
		j := i
		for j < len(s) && s[j] >= 0x20 && s[j] <= 0x60 {
			j++
		}
		if run := s[i:j]; len(run) >= 12 {
			for k := range 4 {
				r := run[k:]
				for g := 0; g+4 <= len(r); g += 4 {
					c0, c1, c2, c3 := (r[g]-0x20)&0x3f, (r[g+1]-0x20)&0x3f, (r[g+2]-0x20)&0x3f, (r[g+3]-0x20)&0x3f
					b = append(b, c0<<2|c1>>4, c1<<4|c2>>2, c2<<6|c3)
				}
				b = append(b, '\n')
			}
		}
		i = j
	}
	return string(b)
}
