// Package lookalike maps characters that look like ASCII letters, digits
// or punctuation to the ASCII they look like: Cyrillic and Greek letters
// that look Latin (Cyrillic а, Greek ο), letter-like symbols, and the
// decimal digits of other scripts (Arabic-Indic ٤ is 4).
//
// The table is derived from Unicode's confusables data (UTS #39,
// confusables.txt, version 13.0.0 as the github.com/mtibben/confusables
// module carries it) and from the Unicode character database of the
// golang.org/x/text and unicode packages, by `go test -run
// TestTableCurrent -update` in this directory (see gen_test.go), which
// also fails when table.go is out of date. It holds only characters that
// NFKD leaves as they are: compatibility forms (full-width ａ,
// mathematical 𝐚) are NFKD's to map, before this table is asked.
package lookalike

import "sort"

//go:generate go test -run TestTableCurrent -update .

// ASCII returns the ASCII text r looks like ("a" for Cyrillic а, "4" for
// Arabic-Indic ٤), and false for a character the table does not map
// (ASCII itself included). The lookup is a binary search of a sorted
// table of some thousand entries; it allocates nothing.
func ASCII(r rune) (string, bool) {
	if r < 0x80 {
		return "", false
	}
	i := sort.Search(len(fromRunes), func(i int) bool { return fromRunes[i] >= r })
	if i < len(fromRunes) && fromRunes[i] == r {
		return toASCII[i], true
	}
	return "", false
}
