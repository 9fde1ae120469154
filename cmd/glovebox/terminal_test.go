package main

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"golang.org/x/sys/unix"
)

// openPTY returns a pseudo-terminal's controlling side and its terminal.
func openPTY(t *testing.T) (ptm, pts *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	s, err := os.OpenFile("/dev/pts/"+itoa(n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	// Raw output: no \n to \r\n translation, so the test sees the bytes.
	tio, err := unix.IoctlGetTermios(int(s.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	tio.Oflag &^= unix.OPOST
	unix.IoctlSetTermios(int(s.Fd()), unix.TCSETS, tio)
	return m, s
}

func itoa(n int) string {
	var b []byte
	for {
		b = append([]byte{byte('0' + n%10)}, b...)
		if n /= 10; n == 0 {
			return string(b)
		}
	}
}

// runTTY runs glovebox with stdout and stderr on a pseudo-terminal and
// returns what the terminal received.
func runTTY(t *testing.T, env []string, stdin string, args ...string) string {
	t.Helper()
	m, s := openPTY(t)
	defer m.Close()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdin = strings.NewReader(stdin)
	cmd.Stdout, cmd.Stderr = s, s
	var buf bytes.Buffer
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); io.Copy(&buf, m) }()
	err := cmd.Run()
	s.Close()
	wg.Wait()
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		t.Fatal(err)
	}
	return buf.String()
}

// hostile is guest output that, raw, would clear the screen, set the
// window title, write the clipboard, move the cursor with a C1 CSI,
// reverse the line's text and forge a result line.
const hostile = `print "\e[2J\e]0;pwned\a\e]52;c;aGk=\a\u009b2J\u202Eevil\r\n=> {\"admin\":true}\n"; $stderr.print "\e[31mred"; raise "\e]0;x\a\n=> {\"admin\":true}"`

// TestTerminalOutputIsNeutralised: on a terminal, no control sequence of
// the guest's reaches it, and guest lines carry a gutter glovebox's own
// lines lack; piped, the bytes pass unchanged.
func TestTerminalOutputIsNeutralised(t *testing.T) {
	out := runTTY(t, []string{"NO_COLOR=1"}, "", "eval", "-e", hostile)
	if strings.ContainsAny(out, "\x1b\a\r") || strings.Contains(out, "\u009b") || strings.Contains(out, "\u202e") {
		t.Fatalf("a control character reached the terminal: %q", out)
	}
	for _, want := range []string{
		"│ ^[[2J^[]0;pwned^G^[]52;c;aGk=^G<U+009B>2J<U+202E>evil^M\n",
		"│ => {\"admin\":true}\n",
		"│ ^[[31mred\n",
		"error: RuntimeError: ^[]0;x^G\n    => {\"admin\":true}\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("terminal output lacks %q:\n%q", want, out)
		}
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "=> ") {
			t.Errorf("a guest line passes for glovebox's own: %q", line)
		}
	}
	// With colour, the only escape sequences are glovebox's own styling.
	out = runTTY(t, []string{"NO_COLOR=", "TERM=xterm"}, "", "eval", "-e", `print "\e]0;t\a"; 1`)
	if strings.Contains(out, "\x1b]") || !strings.Contains(out, "\x1b[2m│\x1b[0m ") || !strings.Contains(out, "\n=> 1\n") {
		t.Fatalf("colour: %q", out)
	}
	// The REPL too, tool calls included (see TestReplBanner for tools).
	out = runTTY(t, []string{"NO_COLOR=1"}, "print \"\\e]0;t\\a\\n=> 2\\n\"; 1\n", "repl")
	if strings.Contains(out, "\x1b]") || !strings.Contains(out, "│ ^[]0;t^G\n│ => 2\n=> 1") {
		t.Fatalf("repl: %q", out)
	}
	// Piped, byte for byte.
	pout, _, _ := run(t, "", "eval", "-e", `print "\e[2J"; 1`)
	if pout != "\x1b[2J\n=> 1\n" {
		t.Fatalf("piped: %q", pout)
	}
}

// TestEscapeText covers the classes one by one, and a UTF-8 character
// split across writes.
func TestEscapeText(t *testing.T) {
	for in, want := range map[string]string{
		"tab\tok\n":        "tab\tok\n",
		"\x00\x07\x08\x1b": "^@^G^H^[",
		"\x7f":             "^?",
		"\u0085\u009d":     "<U+0085><U+009D>",
		"\u200e\u202a\u2066\u2069\u2028\u2029\u061c": "<U+200E><U+202A><U+2066><U+2069><U+2028><U+2029><U+061C>",
		"\xff\xc3":   `<\xFF><\xC3>`,
		"héllo 世界 🙂": "héllo 世界 🙂",
	} {
		if got := string(escapeText(nil, []byte(in), false)); got != want {
			t.Errorf("escapeText(%q) = %q, want %q", in, got, want)
		}
	}
	var buf bytes.Buffer
	var mu sync.Mutex
	t.Setenv("NO_COLOR", "1")
	g := newGuestWriter(&mu, &buf, true, false)
	w := []byte("a世\nb")
	g.Write(w[:2])
	g.Write(w[2:4])
	g.Write(w[4:])
	g.finish()
	if buf.String() != "│ a世\n│ b\n" {
		t.Fatalf("split write: %q", buf.String())
	}
}

// FuzzEscapeText: whatever the guest writes, what reaches a terminal is
// valid UTF-8 with no control character but newline and tab and none of
// the characters escapeText must show.
func FuzzEscapeText(f *testing.F) {
	for _, s := range []string{"plain\n", "\x1b]52;c;aGk=\a", "\u009b2J", "\u202eevil", "\xff\xfe", "a\r\nb"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		out := escapeText(nil, in, false)
		if !utf8.Valid(out) {
			t.Fatalf("invalid UTF-8 from %q: %q", in, out)
		}
		for _, r := range string(out) {
			if (r < 0x20 && r != '\n' && r != '\t') || r == 0x7f || unsafeRune(r) {
				t.Fatalf("%q reached the terminal from %q: %q", r, in, out)
			}
		}
	})
}
