package glovebox

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"maps"
	"math/big"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"

	"github.com/gloveboxhq/glovebox/internal/engine"
	"github.com/gloveboxhq/glovebox/internal/wire"
)

// flowState is the data-flow state of one eval, or of a session across
// its evals: the labelled values the guest was handed and their tokens.
// It is plain data (see snapshot) so that it can be saved with a session.
type flowState struct {
	spec *flowSpec
	mu   sync.Mutex
	key  []byte            // keys the tokens; random per eval or session
	byID map[string]*entry // token -> entry
	byKV map[string]*entry // kind "\x00" value -> entry
	all  []*entry          // in the order recorded
	// shortest is the length of the shortest spelling of any entry: a
	// shorter text holds none; longest that of the longest.
	shortest, longest int
}

// entry is one labelled value and the spellings it is recognised by.
type entry struct {
	kind  Kind
	value string
	token string
	// plain is the value without whitespace, in ASCII lower case; hexes
	// and b64s are its hex and base64 spellings (base64 as the fragments
	// every encoding containing it at each alignment has); digits is
	// set for phone and card values: their digits alone, and for a
	// phone number of more than phoneTail digits also its last
	// phoneTail digits (the number without its country code).
	plain  string
	hexes  []string
	b64s   []string
	digits []string
	// skel is the value's letters and digits alone, ASCII lower-cased
	// (other separators, or none: "ada-lovelace-example-org"); codes its
	// bytes' decimal codes run together (e.bytes.join(",") without the
	// commas). Both are set for values of minSpelled bytes or more.
	skel, codes string
	// nplain and nskel are plain and skel of the value normalized (see
	// normalize), where that differs: "José" is also looked for as
	// "jose", a value in Cyrillic letters also in the Latin ones they
	// look like.
	nplain, nskel string
}

// phoneTail is how many trailing digits of a phone number are matched
// on their own: enough to hold a national number written without the
// country code (+1 212 555 0142 as 2125550142), few enough that the tail
// is no common figure.
const phoneTail = 9

// minSpelled is the shortest value (in bytes) matched in base64 and
// hex, and the shortest base64 fragment looked for: shorter ones would
// match ordinary text by chance.
const minSpelled = 8

func (r *Runtime) newFlow() *flowState {
	if r.flow == nil || len(r.flow.labels) == 0 {
		return nil
	}
	key := make([]byte, 16)
	rand.Read(key)
	return &flowState{spec: r.flow, key: key, byID: map[string]*entry{}, byKV: map[string]*entry{}}
}

// record adds the labelled values fs to the state, minting tokens.
func (f *flowState) record(fs []found) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, x := range fs {
		if x.value == "" || f.byKV[string(x.kind)+"\x00"+x.value] != nil {
			continue
		}
		f.add(x.kind, x.value, "")
	}
}

// add records one value under token (minted when "").
func (f *flowState) add(kind Kind, value, token string) *entry {
	if token == "" {
		m := hmac.New(sha256.New, f.key)
		m.Write([]byte(string(kind) + "\x00" + value))
		sum := hex.EncodeToString(m.Sum(nil))
		for n := 4; ; n += 2 {
			token = "[[" + string(kind) + ":" + sum[:n] + "]]"
			if f.byID[token] == nil || n >= len(sum) {
				break
			}
		}
	}
	e := &entry{kind: kind, value: value, token: token}
	e.plain = foldASCII(removeRunes(value, unicode.IsSpace))
	if len(value) >= minSpelled {
		for _, v := range uniq(value, strings.ToLower(value), strings.ToUpper(value)) {
			e.hexes = append(e.hexes, hex.EncodeToString([]byte(v)))
			for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding} {
				e.b64s = append(e.b64s, b64Fragments(enc, v)...)
			}
		}
	}
	if sk := foldASCII(removeRunes(value, notAlnum)); len(sk) >= minSpelled {
		e.skel = sk
	}
	nv := value
	if n := normalize(value); n != nil {
		nv = n.text
		if p := foldASCII(removeRunes(nv, unicode.IsSpace)); p != e.plain {
			e.nplain = p
		}
		if sk := foldASCII(removeRunes(nv, notAlnum)); len(sk) >= minSpelled && sk != e.skel {
			e.nskel = sk
		}
	}
	if len(value) >= minSpelled {
		var b strings.Builder
		for _, c := range []byte(value) {
			b.WriteString(strconv.Itoa(int(c)))
		}
		e.codes = b.String()
	}
	if kind == KindPhone || kind == KindCard {
		if d := removeRunes(nv, notDigit); len(d) >= 6 {
			e.digits = []string{d}
			if kind == KindPhone && len(d) > phoneTail {
				e.digits = append(e.digits, d[len(d)-phoneTail:])
			}
		}
	}
	f.byID[token], f.byKV[string(kind)+"\x00"+value] = e, e
	f.all = append(f.all, e)
	for _, n := range slices.Concat([]string{e.plain, e.skel, e.codes, e.nplain, e.nskel}, e.digits, e.hexes, e.b64s) {
		if n != "" && (f.shortest == 0 || len(n) < f.shortest) {
			f.shortest = len(n)
		}
		f.longest = max(f.longest, len(n))
	}
	return e
}

func uniq(s ...string) []string {
	slices.Sort(s)
	return slices.Compact(s)
}

// b64Fragments returns, for each of the three byte alignments v can have
// inside longer data, the base64 characters that depend on v's bytes
// alone: every base64 encoding of data containing v holds one of them.
func b64Fragments(enc *base64.Encoding, v string) []string {
	var out []string
	n := len(v)
	for k := range 3 {
		buf := make([]byte, k, k+n+2)
		buf = append(append(buf, v...), 0, 0)
		s := enc.EncodeToString(buf)
		lo, hi := (8*k+5)/6, (8*k+8*n)/6
		if hi-lo >= minSpelled {
			out = append(out, strings.TrimRight(s[lo:hi], "="))
		}
	}
	return out
}

func removeRunes(s string, drop func(rune) bool) string {
	var b strings.Builder
	for _, r := range s {
		if !drop(r) {
			b.WriteRune(r)
		}
	}
	return b.String()
}

// foldASCII lower-cases ASCII letters only, so byte offsets stay put.
func foldASCII(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'A' && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// squeezed is a text with some runes removed; pos maps its offsets back
// to the original's (by walking the original again: matches are rare, so
// no table of offsets is kept).
type squeezed struct {
	text, orig string
	drop       func(rune) bool // nil when nothing was removed
}

// nextRune decodes the rune at s[i:], ASCII without a call.
func nextRune(s string, i int) (rune, int) {
	if c := s[i]; c < utf8.RuneSelf {
		return rune(c), 1
	}
	return utf8.DecodeRuneInString(s[i:])
}

func squeeze(s string, drop func(rune) bool) squeezed {
	first := strings.IndexFunc(s, drop)
	if first < 0 {
		return squeezed{text: s} // nothing to drop: offsets are the same
	}
	b := make([]byte, first, len(s))
	copy(b, s[:first])
	for i := first; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if !drop(rune(c)) {
				b = append(b, c)
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if !drop(r) {
			b = append(b, s[i:i+n]...)
		}
		i += n
	}
	return squeezed{string(b), s, drop}
}

// pos is where byte i of the squeezed text was in the original.
func (q squeezed) pos(i int) int {
	if q.drop == nil {
		return i
	}
	k := 0 // offset in the squeezed text of the rune at j
	for j := 0; j < len(q.orig); {
		r, n := nextRune(q.orig, j)
		if !q.drop(r) {
			if i < k+n {
				return j + i - k
			}
			k += n
		}
		j += n
	}
	return len(q.orig)
}

// span is a part of a text that spells a labelled value.
type span struct {
	lo, hi int
	e      *entry
	how    string // which spelling: "as is", "in hex", ...
}

func notAlnum(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) }

func notDigit(r rune) bool { return r < '0' || r > '9' }

// find returns where s spells a labelled value, in any of the spellings
// recognised, earliest first; overlapping spans are all returned. Text
// with look-alike characters (full-width or mathematical letters,
// Cyrillic or Greek ones that look Latin, combining marks) is searched
// normalized too (see normalize).
func (f *flowState) find(s string) []span {
	return f.findAll(s, nil)
}

// forms are a text and the forms of it find searches: without
// whitespace (for base64, which may be wrapped), its letters and digits
// alone (the value in any case, spacing or punctuation, as a list of its
// characters, or in hex with any separators), and its digits alone (a
// phone or card number, the value's byte codes); folded ones are
// ASCII-lower-cased.
type forms struct {
	src                string
	ws, skel, nums     squeezed
	folded, skelFolded string
}

// ASCII classes for newForms: whitespace, letters and digits, digits.
const (
	clSpace = 1 << iota
	clAlnum
	clDigit
)

var asciiClass = func() (t [utf8.RuneSelf]uint8) {
	for c := range rune(utf8.RuneSelf) {
		if unicode.IsSpace(c) {
			t[c] |= clSpace
		}
		if !notAlnum(c) {
			t[c] |= clAlnum
		}
		if !notDigit(c) {
			t[c] |= clDigit
		}
	}
	return t
}()

// newForms makes t's forms in one pass over s (what squeeze with
// unicode.IsSpace, notAlnum and notDigit, and foldASCII, make).
func newForms(s string) *forms {
	n := len(s)
	buf := make([]byte, 0, 4*n)
	ws, wsf, sk, nm := buf[0:0:n], buf[n:n:2*n], buf[2*n:2*n:3*n], buf[3*n:3*n:4*n]
	for i := 0; i < n; {
		c := s[i]
		if c < utf8.RuneSelf {
			k, l := asciiClass[c], c
			if c >= 'A' && c <= 'Z' {
				l += 'a' - 'A'
			}
			if k&clSpace == 0 {
				ws, wsf = append(ws, c), append(wsf, l)
			}
			if k&clAlnum != 0 {
				sk = append(sk, l)
			}
			if k&clDigit != 0 {
				nm = append(nm, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if !unicode.IsSpace(r) {
			ws, wsf = append(ws, s[i:i+size]...), append(wsf, s[i:i+size]...)
		}
		if !notAlnum(r) {
			sk = append(sk, s[i:i+size]...)
		}
		i += size
	}
	t := &forms{src: s, folded: string(wsf), skelFolded: string(sk)}
	t.ws, t.skel, t.nums = squeezedAs(s, string(ws), unicode.IsSpace), squeezedAs(s, t.skelFolded, notAlnum), squeezedAs(s, string(nm), notDigit)
	return t
}

// squeezedAs is the squeezed text of orig whose drop made text.
func squeezedAs(orig, text string, drop func(rune) bool) squeezed {
	if len(text) == len(orig) {
		return squeezed{text: text}
	}
	return squeezed{text, orig, drop}
}

// findAll is find, handing each to the forms it searched (s's, and its
// normalized text's when that differs): the split check gathers them.
// With each set, the forms are made even of a text too short to hold a
// value whole, which may hold a part of one.
func (f *flowState) findAll(s string, each func(*forms)) []span {
	if len(f.all) == 0 || (len(s) < f.shortest && each == nil) {
		return nil
	}
	t := newForms(s)
	if each != nil {
		each(t)
	}
	var out []span
	if len(s) >= f.shortest {
		out = f.findForms(t)
	}
	if n := normalize(s); n != nil {
		t := newForms(n.text)
		if each != nil {
			each(t)
		}
		if len(n.text) >= f.shortest {
			for _, sp := range f.findForms(t) {
				sp.lo, sp.hi = n.pos(sp.lo, sp.hi)
				sp.how += ", in look-alike characters"
				out = append(out, sp)
			}
			slices.SortStableFunc(out, func(a, b span) int { return a.lo - b.lo })
		}
	}
	return out
}

// findForms is find on the forms of one text.
func (f *flowState) findForms(t *forms) []span {
	s, ws, skel, nums := t.src, t.ws, t.skel, t.nums
	folded, skelFolded := t.folded, t.skelFolded
	// Values too short for a skeleton are also looked for as a list of
	// their characters as p or inspect prints one: ["s", "a", ...].
	var listedFolded string
	var listed squeezed
	var out []span
	look := func(sq squeezed, text, needle string, e *entry, how string) {
		if needle == "" {
			return
		}
		for from := 0; ; {
			i := strings.Index(text[from:], needle)
			if i < 0 {
				return
			}
			i += from
			out = append(out, span{sq.pos(i), sq.pos(i+len(needle)-1) + 1, e, how})
			from = i + len(needle)
		}
	}
	for _, e := range f.all {
		// As is (but for case and spacing) first: the span then holds
		// the value's own leading and trailing punctuation ("+1 (555)"),
		// which its skeleton leaves out.
		look(ws, folded, e.plain, e, "in any case or spacing")
		look(ws, folded, e.nplain, e, "in any case or spacing")
		if e.skel != "" {
			look(skel, skelFolded, e.skel, e, "in any case, spacing or punctuation")
			look(skel, skelFolded, e.nskel, e, "in any case, spacing or punctuation")
		} else {
			if listed.text == "" && strings.ContainsAny(s, `"',`) {
				listed = squeeze(s, func(r rune) bool { return unicode.IsSpace(r) || strings.ContainsRune(`"',[]`, r) })
				listedFolded = foldASCII(listed.text)
			}
			if listedFolded != "" {
				look(listed, listedFolded, e.plain, e, "as a list of its characters")
			}
		}
		for _, h := range e.hexes {
			look(skel, skelFolded, h, e, "in hex")
		}
		look(nums, nums.text, e.codes, e, "as its character codes")
		for _, b := range e.b64s {
			look(ws, ws.text, b, e, "in base64")
		}
		for _, d := range e.digits {
			look(nums, nums.text, d, e, "as its digits")
		}
	}
	slices.SortStableFunc(out, func(a, b span) int { return a.lo - b.lo })
	return out
}

// redactString replaces each spelling of a labelled value in s by its
// token.
func (f *flowState) redactString(s string) string {
	spans := f.find(s)
	if len(spans) == 0 {
		return s
	}
	var b strings.Builder
	end := 0
	for _, sp := range spans {
		if sp.lo < end { // overlaps what was replaced: widen it
			continue
		}
		b.WriteString(s[end:sp.lo])
		b.WriteString(sp.e.token)
		end = sp.hi
		for _, o := range spans { // swallow overlapping spans
			if o.lo < end && o.hi > end {
				end = o.hi
			}
		}
	}
	b.WriteString(s[end:])
	return b.String()
}

// redact returns v (data) with every string redacted.
func (f *flowState) redact(v any) any {
	switch x := v.(type) {
	case string:
		return f.redactString(x)
	case []byte:
		if utf8.Valid(x) {
			return []byte(f.redactString(string(x)))
		}
		if len(f.find(string(x))) > 0 { // binary: shown as text, redacted
			return f.redactString(strings.ToValidUTF8(string(x), "\uFFFD"))
		}
		return x
	case int64, float64, *big.Int:
		// A number that spells a value (a card number as an Integer)
		// becomes the value's token.
		if s, ok := numberText(x); ok && len(s) >= f.shortest && len(f.find(s)) > 0 {
			return f.redactString(s)
		}
		return v
	case []any:
		if s, ok := joinChars(x); ok && len(f.find(s)) > 0 {
			return f.redactString(s) // the value's characters or bytes, one by one
		}
		// A value split over a list's strings and numbers (its parts, a
		// card number as four Integers) makes the list its text, redacted.
		if s, cuts, ok := joinScalars(x); ok && f.crossing(s, cuts) {
			return f.redactString(s)
		}
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = f.redact(e)
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[f.redactString(k)] = f.redact(e)
		}
		return out
	}
	return v
}

// redactGo redacts a Go value a tool returned: it is taken to its data
// form first.
func (f *flowState) redactGo(v any) any {
	switch v.(type) {
	case nil, bool, int64, float64, string, []any, map[string]any:
		return f.redact(v)
	}
	b, err := wire.Encode(nil, v, wire.MaxDepth)
	if err != nil {
		return v
	}
	d, err := wire.Decode(b)
	if err != nil {
		return v
	}
	return f.redact(d)
}

// redactResult replaces labelled values in everything res shows.
func (f *flowState) redactResult(res *Result) {
	f.mu.Lock()
	defer f.mu.Unlock()
	res.flow = f
	if len(f.all) == 0 {
		return
	}
	res.Value = f.redact(res.Value)
	res.Stdout, res.Stderr = f.redactString(res.Stdout), f.redactString(res.Stderr)
	if e := res.Error; e != nil {
		e.Message = f.redactString(e.Message)
		for i, l := range e.Backtrace {
			e.Backtrace[i] = f.redactString(l)
		}
	}
	for i := range res.ToolCalls {
		c := &res.ToolCalls[i]
		c.Args = f.argsRedacted(c.Args)
		c.Result = f.redactGo(c.Result)
		c.Error = f.redactString(c.Error)
	}
}

// redactArgs returns a call's arguments with every string redacted, for
// a paused call's PendingCall.
func (f *flowState) redactArgs(a Args) Args {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.argsRedacted(a)
}

// argsRedacted is redactArgs for a caller holding f.mu.
func (f *flowState) argsRedacted(a Args) Args {
	if a.Positional != nil {
		a.Positional, _ = f.redact(a.Positional).([]any)
	}
	if a.Keyword != nil {
		a.Keyword, _ = f.redact(a.Keyword).(map[string]any)
	}
	return a
}

var tokenPattern = regexp.MustCompile(`\[\[([a-z][a-z0-9_]{0,31}):([0-9a-f]{4,64})\]\]`)

// denial is why a call's arguments may not reach the tool.
type denial struct {
	kind Kind   // "" for an unknown token
	msg  string // what the guest sees
	// hidden: the value was found only in a variant of the arguments
	// (decoded, reversed), where no token can replace it; the
	// transcript drops them.
	hidden bool
}

// checkArgs applies the tool's sink policy to args: tokens of accepted
// kinds become their values, and the first labelled value or token of
// another kind (or an unknown token) is reported.
func (f *flowState) checkArgs(tool string, args Args) (Args, *denial) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p := f.spec.sinks[tool]
	var d *denial
	where := ""
	accepts := func(k Kind) bool { return slices.Contains(p.Accepts, k) }
	// parts gathers the forms of every text scanned, for the check of a
	// value split into parts over them.
	var parts splitTexts
	// scan reports the first labelled value of a kind p does not accept
	// that text holds, in any spelling find knows and, unless split (text
	// is the call's strings joined), in every variant.
	scan := func(text string, split string) {
		each, vs := parts.add, []variant{{text, ""}}
		if split == "" {
			vs = variants(text)
		} else {
			each = nil // the parts are gathered from each string
		}
		for _, v := range vs {
			for _, sp := range f.findAll(v.text, each) {
				if !accepts(sp.e.kind) {
					d = &denial{kind: sp.e.kind, hidden: v.how != "" || split != "",
						msg: fmt.Sprintf("%s may not receive %s data: %s holds a labelled %s value (%s%s%s)", tool, sp.e.kind, where, sp.e.kind, sp.how, v.how, split)}
					return
				}
			}
		}
	}
	var pieces []string // every string value and number of the arguments, in order
	var str func(s string) string
	str = func(s string) string {
		if d != nil {
			return s
		}
		if strings.Contains(s, "[[") {
			s = tokenPattern.ReplaceAllStringFunc(s, func(tok string) string {
				e := f.byID[tok]
				switch {
				case d != nil:
					return tok
				case e == nil:
					d = &denial{msg: fmt.Sprintf("%s: %s holds the token %s, which this session did not issue (tokens stand for values only in the session that showed them)", tool, where, tok)}
					return tok
				case !slices.Contains(p.Accepts, e.kind):
					d = &denial{kind: e.kind, msg: fmt.Sprintf("%s may not receive %s data: %s holds the token %s", tool, e.kind, where, tok)}
					return tok
				}
				return e.value
			})
			if d != nil {
				return s
			}
		}
		pieces = append(pieces, s)
		scan(s, "")
		return s
	}
	// key checks a Hash key or keyword, which is not joined with the
	// values (keys interleaved with values would hide a split value),
	// but is one of the texts the parts of a value are looked for in.
	key := func(k string) string {
		n := len(pieces)
		k = str(k)
		pieces = pieces[:n]
		return k
	}
	var walk func(v any) (any, bool)
	walk = func(v any) (any, bool) {
		switch x := v.(type) {
		case string:
			n := str(x)
			return n, n != x
		case []byte:
			if utf8.Valid(x) {
				if s := str(string(x)); s != string(x) {
					return []byte(s), true
				}
			} else if d == nil {
				pieces = append(pieces, string(x))
				scan(string(x), "") // binary: checked, never rewritten
			}
		case int64, float64, *big.Int:
			// A number: its digits (a card number sent as an Integer).
			if t, ok := numberText(x); ok && d == nil {
				pieces = append(pieces, t)
				scan(t, "")
			}
		case []any:
			if j, ok := joinChars(x); ok && d == nil {
				str(j) // the value's characters or bytes, one by one
			}
			var out []any
			for i, e := range x {
				if n, changed := walk(e); changed {
					if out == nil {
						out = slices.Clone(x)
					}
					out[i] = n
				}
			}
			if out != nil {
				return out, true
			}
		case map[string]any:
			var out map[string]any
			for _, k := range slices.Sorted(maps.Keys(x)) { // in one order, for the join
				e := x[k]
				nk := key(k)
				n, changed := walk(e)
				if nk != k || changed {
					if out == nil {
						out = maps.Clone(x)
					}
					delete(out, k)
					out[nk] = n
				}
			}
			if out != nil {
				return out, true
			}
		}
		return v, false
	}
	out := Args{}
	if args.Positional != nil {
		out.Positional = make([]any, len(args.Positional))
		for i, a := range args.Positional {
			where = fmt.Sprintf("argument %d", i+1)
			out.Positional[i], _ = walk(a)
		}
	}
	if args.Keyword != nil {
		out.Keyword = make(map[string]any, len(args.Keyword))
		for _, k := range slices.Sorted(maps.Keys(args.Keyword)) {
			where = "keyword " + k
			out.Keyword[key(k)], _ = walk(args.Keyword[k])
		}
	}
	// A value split between the call's strings reaches the tool whole:
	// the strings are checked joined, in order and in reverse order (the
	// parts may be as short as a character), and the value is looked for
	// in parts anywhere in them (values, keys and keywords' names, and
	// their variants, in any order; parts of partLen or more).
	if d == nil && len(pieces) > 1 {
		where = "the call"
		scan(strings.Join(pieces, ""), ", split across its arguments")
		if d == nil {
			slices.Reverse(pieces)
			scan(strings.Join(pieces, ""), ", split across its arguments")
		}
	}
	if d == nil {
		if e, how := f.split(&parts, accepts); e != nil {
			d = &denial{kind: e.kind, hidden: true,
				msg: fmt.Sprintf("%s may not receive %s data: the call holds a labelled %s value (%s, in parts across its strings)", tool, e.kind, e.kind, how)}
		}
	}
	return out, d
}

// flowCheck is the call path's hook before a tool runs: it applies the
// sink policy, asking the approver when the policy says so. It returns
// the arguments the tool gets, whether approval was already given, and
// the guest error of a refused call (nil when the call may go on).
func (st *evalState) flowCheck(ctx context.Context, c *engine.Call, entry *ToolCall, args Args) (Args, bool, error) {
	f := st.flow
	out, d := f.checkArgs(c.Name, args)
	if d == nil {
		return out, false, nil
	}
	if d.kind != "" && f.spec.sinks[c.Name].Approve {
		if reason, ok := st.approve(ctx, c, out); ok {
			entry.Approval = "approved"
			return out, true, nil
		} else if err := st.approverSuspend; err != nil {
			// A person decides later: the call suspends, and an approved
			// continuation runs it with the values (tokens replaced).
			st.approverSuspend = nil
			_, err = st.suspendCall(ctx, c, entry, err, true)
			if st.sus != nil && st.sus.pending != nil {
				st.sus.pending.Args = out
			}
			return args, false, err
		} else if reason != "" {
			d.msg += "; approval: " + reason
		}
	}
	if d.kind != "" && f.spec.sinks[c.Name].Approve {
		entry.Approval = "denied"
	}
	if d.hidden {
		entry.Args, entry.Elided = Args{}, true
	}
	st.finish(ctx, entry, OutcomeDenied, d.msg)
	return args, false, &engine.GuestError{Class: "ToolDenied", Message: d.msg}
}

// flowRecord is the call path's hook after a tool returned v: it records
// the values the tool's labels mark.
func (st *evalState) flowRecord(tool string, v any) {
	if labels := st.flow.spec.labels[tool]; len(labels) > 0 {
		st.flow.record(collectLabels(labels, v))
	}
}

// Reveal returns s with every token the eval (or its session, up to this
// eval) issued replaced by the value it stands for: for the host, to show
// a person what the model wrote about their data. Text without tokens,
// and a Result of an eval without labels, give s back.
func (r *Result) Reveal(s string) string {
	if r.flow == nil || !strings.Contains(s, "[[") {
		return s
	}
	r.flow.mu.Lock()
	defer r.flow.mu.Unlock()
	return tokenPattern.ReplaceAllStringFunc(s, func(tok string) string {
		if e := r.flow.byID[tok]; e != nil {
			return e.value
		}
		return tok
	})
}

// flowKey is the context key under which a tool call's context holds
// its flowCall.
type flowKey struct{}

// flowCall is a tool call's data-flow state and the tool's name.
type flowCall struct {
	f    *flowState
	tool string
}

// CheckOutbound applies the data-flow policy to data a tool is about to
// send out on the guest's behalf — a command's network requests (set
// box.Network.Inspect to egress.Labels(ctx)), a message, a file — as if
// it were the tool's own arguments: parts names each piece ("url",
// "body"), and a piece holding a labelled value of a kind the tool's
// [SinkPolicy] does not accept, in any spelling a sink recognises, or a
// token of one, gives a *[ToolError] of class ToolDenied naming the kind
// and the piece (a tool that returns it raises Glovebox::ToolDenied in
// the guest). ctx is the tool call's context or one derived from it;
// outside a call of a labelled eval (no label on the Runtime, a tool
// registered without a context parameter, another goroutine's context)
// it returns nil. It is safe to call from several goroutines while the
// call runs, and after it returned.
func CheckOutbound(ctx context.Context, parts map[string]string) error {
	fc, ok := ctx.Value(flowKey{}).(flowCall)
	if !ok || len(parts) == 0 {
		return nil
	}
	kw := make(map[string]any, len(parts))
	for k, v := range parts {
		kw[k] = v
	}
	if _, d := fc.f.checkArgs(fc.tool, Args{Keyword: kw}); d != nil {
		return &ToolError{Class: "ToolDenied", Message: d.msg}
	}
	return nil
}

// variant is a text decoded or rewritten the way a program might hide a
// value in it.
type variant struct {
	text, how string
}

// spelledOut returns s with the words "at" and "dot" (any case), each
// with the spaces and the one bracket around it, read as "@" and ".":
// "sam [at] example dot net" is sam@example.net. (A regular expression
// did this at a tenth of the speed, the larger part of a sink check.)
func spelledOut(s string) string {
	var b strings.Builder
	last := 0 // s[last:] is not written yet
	for i := 0; i < len(s); {
		if !isWordByte(s[i]) {
			i++
			continue
		}
		j := i
		for j < len(s) && isWordByte(s[j]) {
			j++
		}
		word := ""
		switch {
		case strings.EqualFold(s[i:j], "at"):
			word = "@"
		case strings.EqualFold(s[i:j], "dot"):
			word = "."
		}
		if word != "" {
			lo := max(skipBack(s, i), last)
			b.WriteString(s[last:lo])
			b.WriteString(word)
			last = skipOn(s, j)
		}
		i = j
	}
	if last == 0 {
		return s
	}
	b.WriteString(s[last:])
	return b.String()
}

func isWordByte(c byte) bool {
	return c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

func isSpaceByte(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'
}

// skipBack returns where the spaces, the one opening bracket and the
// spaces before s[i] begin; skipOn where those after s[:j] end.
func skipBack(s string, i int) int {
	for i > 0 && isSpaceByte(s[i-1]) {
		i--
	}
	if i > 0 && strings.IndexByte("[({<", s[i-1]) >= 0 {
		i--
	}
	for i > 0 && isSpaceByte(s[i-1]) {
		i--
	}
	return i
}

func skipOn(s string, j int) int {
	for j < len(s) && isSpaceByte(s[j]) {
		j++
	}
	if j < len(s) && strings.IndexByte("])}>", s[j]) >= 0 {
		j++
	}
	for j < len(s) && isSpaceByte(s[j]) {
		j++
	}
	return j
}

// escapedChar is a character written as an escape: \u0040, \u{40},
// \x40, &#64; or &#x40;.
var escapedChar = regexp.MustCompile(`\\u\{?([0-9a-fA-F]{2,6})\}?|\\x([0-9a-fA-F]{2})|&#[xX]([0-9a-fA-F]{1,6});|&#([0-9]{1,7});`)

// unescape replaces each escapedChar in s by the character it stands for.
func unescape(s string) string {
	return escapedChar.ReplaceAllStringFunc(s, func(m string) string {
		g := escapedChar.FindStringSubmatch(m)
		base, digits := 16, g[1]+g[2]+g[3]
		if g[4] != "" {
			base, digits = 10, g[4]
		}
		n, err := strconv.ParseUint(digits, base, 32)
		if err != nil || !utf8.ValidRune(rune(n)) {
			return m
		}
		return string(rune(n))
	})
}

// rot13 rotates s's ASCII letters by 13 places.
func rot13(s string) string {
	b := []byte(s)
	for i, c := range b {
		switch {
		case c >= 'a' && c <= 'z':
			b[i] = 'a' + (c-'a'+13)%26
		case c >= 'A' && c <= 'Z':
			b[i] = 'A' + (c-'A'+13)%26
		}
	}
	return string(b)
}

// variants returns s and the texts a sink also checks: s URL-decoded,
// with its escaped characters (\u0040, \x40, &#64;) decoded, with " at "
// and " dot " (bracketed or not) read as @ and ., uudecoded, in ROT13,
// and reversed; and, when s has look-alike characters, those of s
// normalized (see normalize) but for s normalized itself, which find
// searches. Only sinks check them: a match has no place in s to put a
// token at.
func variants(s string) []variant {
	out := spellings(s)
	if n := normalize(s); n != nil {
		for _, v := range spellings(n.text)[1:] {
			out = append(out, variant{v.text, v.how + ", in look-alike characters"})
		}
	}
	return out
}

// spellings is variants without the normalized text's.
func spellings(s string) []variant {
	out := []variant{{s, ""}}
	if strings.ContainsRune(s, '%') {
		if u, err := url.QueryUnescape(s); err == nil && u != s {
			out = append(out, variant{u, ", URL-encoded"})
		}
	}
	if strings.ContainsAny(s, `\&`) {
		if u := unescape(s); u != s {
			out = append(out, variant{u, ", its characters escaped"})
		}
	}
	if r := rot13(s); r != s {
		out = append(out, variant{r, ", in ROT13"})
	}
	if sp := spelledOut(s); sp != s {
		out = append(out, variant{sp, ", spelled out"})
	}
	if u := uudecoded(s); u != "" {
		out = append(out, variant{u, ", uuencoded"})
	}
	r := []rune(s)
	slices.Reverse(r)
	return append(out, variant{string(r), ", reversed"})
}

// redactTees makes the eval's live output (WithOutput) go out redacted,
// a line at a time: a line is written once its newline arrives, the rest
// when the eval ends (the returned flush, which the caller runs after the
// eval). Without labels it changes nothing.
func (st *evalState) redactTees(req *engine.Request) (flush func()) {
	if st.flow == nil || (req.StdoutTee == nil && req.StderrTee == nil) {
		return func() {}
	}
	var ws []*lineRedactor
	for _, tee := range []*io.Writer{&req.StdoutTee, &req.StderrTee} {
		if *tee != nil {
			lr := &lineRedactor{w: *tee, f: st.flow}
			*tee = lr
			ws = append(ws, lr)
		}
	}
	return func() {
		for _, lr := range ws {
			lr.flush()
		}
	}
}

// lineRedactor writes whole lines, redacted, to w.
type lineRedactor struct {
	w   io.Writer
	f   *flowState
	buf []byte
}

func (l *lineRedactor) Write(p []byte) (int, error) {
	l.buf = append(l.buf, p...)
	if i := bytes.LastIndexByte(l.buf, '\n'); i >= 0 {
		l.emit(l.buf[:i+1])
		l.buf = append(l.buf[:0], l.buf[i+1:]...)
	}
	return len(p), nil
}

func (l *lineRedactor) emit(b []byte) {
	l.f.mu.Lock()
	s := l.f.redactString(string(b))
	l.f.mu.Unlock()
	l.w.Write([]byte(s))
}

func (l *lineRedactor) flush() {
	if len(l.buf) > 0 {
		l.emit(l.buf)
		l.buf = nil
	}
}

// flowSaved is the saved form of a flowState, for a suspended session:
// the key tokens are made with and every labelled value with its kind and
// token, in the order recorded. It holds the values in clear, so it must
// be sealed (encrypted and authenticated) with the rest of the session's
// state before it leaves the process.
type flowSaved struct {
	Key    []byte       `json:"key"`
	Values []flowSavedV `json:"values"`
}

type flowSavedV struct {
	Kind  Kind   `json:"kind"`
	Value string `json:"value"`
	Token string `json:"token"`
}

// save returns f's saved form; nil for a nil f (no labels).
func (f *flowState) save() *flowSaved {
	if f == nil {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	s := &flowSaved{Key: slices.Clone(f.key), Values: make([]flowSavedV, 0, len(f.all))}
	for _, e := range f.all {
		s.Values = append(s.Values, flowSavedV{e.kind, e.value, e.token})
	}
	return s
}

// restoreFlow makes the data-flow state a session resumed from s has on
// r: the same tokens for the same values, and new values' tokens made
// with the same key. It fails when r has no labels but s holds values,
// or s is malformed.
func (r *Runtime) restoreFlow(s *flowSaved) (*flowState, error) {
	f := r.newFlow()
	if s == nil {
		return f, nil
	}
	if f == nil {
		if len(s.Values) > 0 {
			return nil, fmt.Errorf("glovebox: the saved session holds %d labelled values, and this Runtime labels no tool", len(s.Values))
		}
		return nil, nil
	}
	if len(s.Key) != len(f.key) {
		return nil, fmt.Errorf("glovebox: the saved data-flow state has a %d-byte key, want %d", len(s.Key), len(f.key))
	}
	f.key = slices.Clone(s.Key)
	for _, v := range s.Values {
		if !kindPattern.MatchString(string(v.Kind)) || !tokenPattern.MatchString(v.Token) || f.byID[v.Token] != nil {
			return nil, fmt.Errorf("glovebox: the saved data-flow state has a bad entry (kind %q, token %q)", v.Kind, v.Token)
		}
		f.add(v.Kind, v.Value, v.Token)
	}
	return f, nil
}

// putFlow writes the data-flow part of a state's body, after its
// manifest: the key tokens are made with (empty when no tool is labelled),
// the number of labelled values, and each as its kind, value and token, in
// the order recorded. The values are in clear: the body is sealed.
func putFlow(e *benc, f *flowState) {
	s := f.save()
	if s == nil {
		e.bytes(nil)
		e.u64(0)
		return
	}
	e.bytes(s.Key)
	e.u64(uint64(len(s.Values)))
	for _, v := range s.Values {
		e.str(string(v.Kind))
		e.str(v.Value)
		e.str(v.Token)
	}
}

// readFlow reads what putFlow wrote and makes of it the data-flow state
// the resumed session or continued eval has on r. It fails with
// ErrStateInvalid for a malformed part, and with a StateMismatchError of
// "tools" when the state holds labelled values and r labels no tool.
func (r *Runtime) readFlow(d *bdec) (*flowState, error) {
	key := d.bytes()
	n := d.u64()
	if d.err == nil && n > uint64(len(d.b)) { // each value takes 3 bytes or more
		d.err, n = errShortBody, 0
	}
	var s *flowSaved
	if len(key) > 0 || n > 0 {
		s = &flowSaved{Key: slices.Clone(key)}
		for range n {
			if d.err != nil {
				break
			}
			s.Values = append(s.Values, flowSavedV{Kind: Kind(d.str()), Value: d.str(), Token: d.str()})
		}
	}
	if d.err != nil {
		return nil, fmt.Errorf("%w: the data-flow state: %v", ErrStateInvalid, d.err)
	}
	if s != nil && len(s.Values) > 0 && (r.flow == nil || len(r.flow.labels) == 0) {
		return nil, &StateMismatchError{What: "tools", State: fmt.Sprintf("%d labelled values", len(s.Values)), Runtime: "no labelled tool"}
	}
	f, err := r.restoreFlow(s)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrStateInvalid, err)
	}
	return f, nil
}

// joinChars joins a list of one-character strings, or of integers that
// are bytes, into the string they spell; ok is false for any other list
// (or one shorter than minSpelled).
func joinChars(x []any) (s string, ok bool) {
	if len(x) < minSpelled {
		return "", false
	}
	b := make([]byte, 0, len(x))
	for _, e := range x {
		switch c := e.(type) {
		case string:
			if utf8.RuneCountInString(c) != 1 {
				return "", false
			}
			b = append(b, c...)
		case int64:
			if c < 0 || c > 255 {
				return "", false
			}
			b = append(b, byte(c))
		default:
			return "", false
		}
	}
	return string(b), true
}
