package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"unicode/utf8"

	"golang.org/x/term"

	"github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/internal/wire"
)

// Human-mode output. What the guest prints is untrusted: on a terminal it
// could clear the screen, set the window title, write the clipboard (OSC
// 52) or print a line that looks like glovebox's own "=> value". So when
// a stream is a terminal, every guest line gets a gutter ("│ ") that
// glovebox's own lines never have, and control characters are shown
// escaped instead of acted on: C0 controls other than newline and tab as
// ^X, DEL as ^?, C1 controls and the Unicode characters that reorder or
// break lines (bidirectional overrides and isolates, U+2028, U+2029) as
// <U+XXXX>, and bytes that are not UTF-8 as <\xNN>. Guest text glovebox
// prints itself (error messages, backtraces, tool-call arguments) is
// escaped the same way. When a stream is not a terminal, guest output
// passes through byte for byte, as a pipe or file expects.

// isTerminal reports whether f is a terminal.
func isTerminal(f *os.File) bool { return term.IsTerminal(int(f.Fd())) }

// useColor reports whether glovebox may style its terminal output: not
// when NO_COLOR is set or TERM is dumb.
func useColor() bool {
	return os.Getenv("NO_COLOR") == "" && os.Getenv("TERM") != "dumb"
}

// Gutters: dim for stdout, dim red for stderr.
func gutter(stderr, color bool) string {
	switch {
	case !color:
		return "│ "
	case stderr:
		return "\x1b[2;31m│\x1b[0m "
	}
	return "\x1b[2m│\x1b[0m "
}

// guestWriter writes guest output to w: raw, or (on a terminal) escaped
// with a gutter on every line. It is safe for concurrent use; stdout and
// stderr writers that share one terminal share mu so their lines do not
// tear.
type guestWriter struct {
	mu      *sync.Mutex
	w       io.Writer
	safe    bool   // escape and add gutters
	gutter  string // the line prefix when safe
	color   bool
	midLine bool   // the last byte written was not a newline
	partial []byte // an incomplete UTF-8 sequence held for the next write
	wrote   bool
}

func newGuestWriter(mu *sync.Mutex, w io.Writer, safe, stderr bool) *guestWriter {
	c := safe && useColor()
	return &guestWriter{mu: mu, w: w, safe: safe, gutter: gutter(stderr, c), color: c}
}

func (g *guestWriter) Write(p []byte) (int, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(p) == 0 {
		return 0, nil
	}
	g.wrote = true
	if !g.safe {
		g.midLine = p[len(p)-1] != '\n'
		g.w.Write(p)
		return len(p), nil
	}
	b := append(g.partial, p...)
	g.partial = nil
	// Hold back a multibyte character cut by the write boundary.
	for i := 1; i <= 3 && i <= len(b); i++ {
		c := b[len(b)-i]
		if c < utf8.RuneSelf {
			break
		}
		if utf8.RuneStart(c) {
			if !utf8.FullRune(b[len(b)-i:]) {
				g.partial = append([]byte(nil), b[len(b)-i:]...)
				b = b[:len(b)-i]
			}
			break
		}
	}
	g.w.Write(g.render(b))
	return len(p), nil
}

// render escapes b and adds gutters, tracking the line state.
func (g *guestWriter) render(b []byte) []byte {
	var out []byte
	for len(b) > 0 {
		if !g.midLine {
			out = append(out, g.gutter...)
			g.midLine = true
		}
		i := indexByte(b, '\n')
		line := b
		if i >= 0 {
			line = b[:i]
		}
		out = escapeText(out, line, g.color)
		if i < 0 {
			break
		}
		out = append(out, '\n')
		g.midLine = false
		b = b[i+1:]
	}
	return out
}

func indexByte(b []byte, c byte) int {
	for i, x := range b {
		if x == c {
			return i
		}
	}
	return -1
}

// finish flushes a held partial character and ends an unfinished line,
// so that glovebox's next line starts at the margin.
func (g *guestWriter) finish() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.partial) > 0 {
		g.w.Write(escapeText(nil, g.partial, g.color))
		g.partial = nil
	}
	if g.midLine {
		g.w.Write([]byte{'\n'})
		g.midLine = false
	}
}

// escapeText appends s to dst with control and line-reordering characters
// made visible (see the comment at the top of this file); newline and tab
// pass.
func escapeText(dst, s []byte, color bool) []byte {
	mark := func(text string) {
		if color {
			dst = append(dst, "\x1b[7m"...)
			dst = append(dst, text...)
			dst = append(dst, "\x1b[27m"...)
		} else {
			dst = append(dst, text...)
		}
	}
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '\n' || c == '\t':
				dst = append(dst, c)
			case c < 0x20:
				mark("^" + string(rune(c+0x40)))
			case c == 0x7f:
				mark("^?")
			default:
				dst = append(dst, c)
			}
			i++
			continue
		}
		r, n := utf8.DecodeRune(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			mark(fmt.Sprintf(`<\x%02X>`, c))
		case unsafeRune(r):
			mark(fmt.Sprintf("<U+%04X>", r))
		default:
			dst = append(dst, s[i:i+n]...)
		}
		i += n
	}
	return dst
}

// unsafeRune reports the non-ASCII characters a terminal may act on or
// that reorder or break the line as displayed.
func unsafeRune(r rune) bool {
	switch {
	case r >= 0x80 && r <= 0x9f: // C1 controls (CSI, OSC, ...)
		return true
	case r == 0x061c, r == 0x200e, r == 0x200f: // bidi marks
		return true
	case r >= 0x202a && r <= 0x202e: // bidi embeddings and overrides
		return true
	case r >= 0x2066 && r <= 0x2069: // bidi isolates
		return true
	case r == 0x2028 || r == 0x2029: // line and paragraph separators
		return true
	}
	return false
}

// guestText is s, guest-controlled text glovebox prints itself, made safe
// for a terminal when safe is set: escaped, with its line breaks
// indented so it cannot pass for a line of glovebox's own.
func guestText(s string, safe bool) string {
	if !safe {
		return s
	}
	e := string(escapeText(nil, []byte(s), useColor()))
	return strings.ReplaceAll(e, "\n", "\n    ")
}

// valueJSON is the result's value as JSON, exactly as --json writes it
// (no HTML escaping; exact integers; NaN and the infinities as strings).
func valueJSON(res *glovebox.Result) string {
	b, err := wire.EncodeJSON(nil, res.Value, wire.MaxDepth)
	if err != nil {
		return fmt.Sprint(res.Value)
	}
	return string(b)
}
