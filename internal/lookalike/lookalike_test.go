package lookalike

import "testing"

func TestASCII(t *testing.T) {
	for r, want := range map[rune]string{
		'а': "a", 'е': "e", 'о': "o", 'р': "p", 'с': "c", 'х': "x", // Cyrillic
		'А': "A", 'І': "I", 'і': "i",
		'Α': "A", 'Η': "H", 'Ι': "I", 'ο': "o", 'ρ': "p", // Greek
		'٤': "4", '०': "0", '௭': "7", // other scripts' digits
	} {
		if got, ok := ASCII(r); !ok || got != want {
			t.Errorf("ASCII(%q) = %q, %v; want %q", r, got, ok, want)
		}
	}
	for _, r := range []rune{'a', 'é', 'ж', '中', 'ｓ'} { // ASCII, not look-alikes, NFKD's
		if got, ok := ASCII(r); ok {
			t.Errorf("ASCII(%q) = %q, want none", r, got)
		}
	}
}
