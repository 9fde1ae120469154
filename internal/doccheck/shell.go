package doccheck

import (
	"bytes"
	"fmt"
	"github.com/gloveboxhq/glovebox/internal/spawn"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Directive is what a block's `<!-- run: ... -->` comments ask of the
// harness: clauses separated by ";", each one of
//
//	skip (REASON)          not run; listed with REASON (a model key, a service absent here)
//	file NAME              a yaml, json or other data block: written to NAME (relative to the guide's directory) when the guide reaches it
//	timeout DURATION       the block's time limit instead of the default (a Go duration: 90s, 2m)
//	background port N      a server: started, then the guide goes on once something listens on 127.0.0.1:N; stopped when the guide ends
//	stdio (COMMAND)        a JSON-RPC transcript ("→ " lines sent, "← " lines received) played against COMMAND's standard input and output
//
// The zero Directive runs the block in the foreground with the default
// time limit.
type Directive struct {
	Skip       string        // the reason the block is not run; "" when it runs
	File       string        // where to write a data block; ""
	Timeout    time.Duration // 0: the harness's default
	Background bool          // a server left running for the rest of the guide
	Port       int           // the loopback port a background block listens on
	Stdio      string        // the command a JSON-RPC transcript is played against; ""
}

// ParseDirective parses a Block's Run text. Unknown clauses, a skip
// without a reason in parentheses, a bad duration or port, and
// background without a port are errors.
func ParseDirective(s string) (Directive, error) {
	var d Directive
	for _, c := range splitClauses(s) {
		c = strings.TrimSpace(c)
		if c == "" {
			continue
		}
		word, rest, _ := strings.Cut(c, " ")
		rest = strings.TrimSpace(rest)
		switch word {
		case "skip":
			if !strings.HasPrefix(rest, "(") || !strings.HasSuffix(rest, ")") || len(rest) < 3 {
				return d, fmt.Errorf("run: %q: a skip says why, in parentheses: skip (needs ANTHROPIC_API_KEY)", c)
			}
			d.Skip = rest[1 : len(rest)-1]
		case "file":
			if rest == "" || strings.ContainsAny(rest, " \t") || strings.HasPrefix(rest, "/") || strings.Contains(rest, "..") {
				return d, fmt.Errorf("run: %q: file takes one relative path inside the guide's directory", c)
			}
			d.File = rest
		case "timeout":
			t, err := time.ParseDuration(rest)
			if err != nil || t <= 0 {
				return d, fmt.Errorf("run: %q: timeout takes a positive duration such as 90s", c)
			}
			d.Timeout = t
		case "background":
			p, ok := strings.CutPrefix(rest, "port ")
			n, err := strconv.Atoi(strings.TrimSpace(p))
			if !ok || err != nil || n <= 0 || n > 65535 {
				return d, fmt.Errorf("run: %q: a background block names the port it listens on: background port 8443", c)
			}
			d.Background, d.Port = true, n
		case "stdio":
			if !strings.HasPrefix(rest, "(") || !strings.HasSuffix(rest, ")") || len(rest) < 3 {
				return d, fmt.Errorf("run: %q: stdio names the command in parentheses: stdio (glovebox mcp)", c)
			}
			d.Stdio = rest[1 : len(rest)-1]
		default:
			return d, fmt.Errorf("run: %q: unknown clause %q (skip, file, timeout, background, stdio)", c, word)
		}
	}
	return d, nil
}

// splitClauses splits s at the semicolons outside parentheses (a skip's
// reason may hold one).
func splitClauses(s string) []string {
	var (
		out   []string
		depth int
		from  int
	)
	for i, r := range s {
		switch r {
		case '(':
			depth++
		case ')':
			depth = max(0, depth-1)
		case ';':
			if depth == 0 {
				out = append(out, s[from:i])
				from = i + 1
			}
		}
	}
	return append(out, s[from:])
}

// Command is one command of a shell block: one line, or several when a
// quote, a here-document, a compound command or a trailing backslash
// carries it on.
type Command struct {
	Line int    // the index of its first line in the block's Lines
	Text string // what the shell runs, its comments included
	// Exit is the exit status it must end with: the N of "exit N" in its
	// comments, else 0; -1 in a transcript, where its output is compared
	// instead (a transcript checks a status with "echo $?").
	Exit int
	// Value is X when a comment says "=> X": the output must hold the
	// line's "=> X" (glovebox's human-mode value line); "" otherwise.
	Value string
	// Output is, in a transcript, the lines the command must print
	// (stdout and stderr as a terminal shows them); nil otherwise.
	Output []string
}

// IsTranscript reports whether a shell block is a terminal transcript:
// its first non-blank line starts with the prompt "$ ". A transcript's
// commands follow prompts and the lines up to the next prompt are their
// output; other shell blocks are scripts, a command per line (or more)
// with comments.
func IsTranscript(lines []string) bool {
	for _, l := range lines {
		if strings.TrimSpace(l) != "" {
			return strings.HasPrefix(l, "$ ")
		}
	}
	return false
}

var (
	exitRe  = regexp.MustCompile(`\bexit (\d+)\b`)
	valueRe = regexp.MustCompile(`=> (.+?)\s*$`)
)

// Commands splits a shell block into its commands. A command ends at the
// first line where bash finds it complete (bash -n reads it without an
// error or a warning); lines holding only a comment, outside a command,
// are left out. A block that ends inside a command is an error.
func Commands(lines []string) ([]Command, error) {
	if IsTranscript(lines) {
		return transcript(lines)
	}
	var (
		cmds []Command
		cur  []string
		at   int
	)
	for i, l := range lines {
		if len(cur) == 0 {
			t := strings.TrimSpace(l)
			if t == "" || strings.HasPrefix(t, "#") {
				continue
			}
			at = i
		}
		cur = append(cur, l)
		text := strings.Join(cur, "\n")
		if strings.HasSuffix(l, "\\") || !complete(text) {
			continue
		}
		c := Command{Line: at, Text: text}
		comments := Comments(text)
		if m := exitRe.FindStringSubmatch(comments); m != nil {
			c.Exit, _ = strconv.Atoi(m[1])
		}
		if m := valueRe.FindStringSubmatch(comments); m != nil {
			c.Value = m[1]
		}
		cmds = append(cmds, c)
		cur = nil
	}
	if cur != nil {
		return nil, fmt.Errorf("line %d: the block ends inside a command: %s", at+1, firstLine(strings.Join(cur, "\n")))
	}
	return cmds, nil
}

// transcript splits a "$ " transcript into commands and their output.
func transcript(lines []string) ([]Command, error) {
	var (
		cmds []Command
		cur  []string // the command being read, prompt stripped
		c    *Command
	)
	for i, l := range lines {
		if cur != nil {
			cur = append(cur, l)
		} else if rest, ok := strings.CutPrefix(l, "$ "); ok {
			if c != nil {
				cmds = append(cmds, *c)
			}
			c = &Command{Line: i, Exit: -1}
			cur = []string{rest}
		} else {
			if c == nil {
				return nil, fmt.Errorf("line %d: a transcript starts with a prompt (\"$ \")", i+1)
			}
			c.Output = append(c.Output, l)
			continue
		}
		text := strings.Join(cur, "\n")
		if strings.HasSuffix(l, "\\") || !complete(text) {
			continue
		}
		c.Text, cur = text, nil
	}
	if cur != nil {
		return nil, fmt.Errorf("line %d: the block ends inside a command: %s", c.Line+1, firstLine(strings.Join(cur, "\n")))
	}
	if c != nil {
		cmds = append(cmds, *c)
	}
	for i := range cmds {
		for len(cmds[i].Output) > 0 && strings.TrimSpace(cmds[i].Output[len(cmds[i].Output)-1]) == "" {
			cmds[i].Output = cmds[i].Output[:len(cmds[i].Output)-1]
		}
	}
	return cmds, nil
}

// complete reports whether bash reads text as whole commands: no
// unclosed quote, compound command or here-document.
func complete(text string) bool {
	cmd := exec.Command("bash", "--noprofile", "--norc", "-n")
	cmd.Stdin = strings.NewReader(text + "\n")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	return spawn.Run(cmd) == nil && stderr.Len() == 0
}

// Comments returns the comments of shell text (each from an unquoted "#"
// that starts a word to the end of its line), joined by newlines. The
// bodies of here-documents are data, not comments.
func Comments(text string) string {
	var (
		out     []string
		quote   byte
		word    bool     // inside a word: a '#' here is not a comment
		pending []string // here-document delimiters whose bodies start on the next line
	)
	for i := 0; i < len(text); i++ {
		ch := text[i]
		switch {
		case ch == '\n' && quote == 0 && len(pending) > 0:
			// Skip the bodies, each up to its delimiter's line.
			rest := text[i+1:]
			for _, delim := range pending {
				for {
					line, after, found := strings.Cut(rest, "\n")
					rest = after
					if strings.TrimLeft(line, "\t") == delim || !found {
						break
					}
				}
			}
			pending = nil
			i = len(text) - len(rest) - 1
			word = false
		case quote == '\'':
			if ch == '\'' {
				quote = 0
			}
		case quote == '"':
			if ch == '\\' {
				i++
			} else if ch == '"' {
				quote = 0
			}
		case ch == '\\':
			i++
			word = true
		case ch == '<' && strings.HasPrefix(text[i:], "<<") && !strings.HasPrefix(text[i:], "<<<"):
			j := i + 2
			if j < len(text) && text[j] == '-' {
				j++
			}
			for j < len(text) && (text[j] == ' ' || text[j] == '\t') {
				j++
			}
			k := j
			for k < len(text) && !strings.ContainsRune(" \t\n;|&<>()", rune(text[k])) {
				k++
			}
			if delim := strings.Trim(text[j:k], `'"`); delim != "" {
				pending = append(pending, delim)
			}
			i, word = k-1, false
		case ch == '\'' || ch == '"':
			quote, word = ch, true
		case ch == '#' && !word:
			end := strings.IndexByte(text[i:], '\n')
			if end < 0 {
				end = len(text) - i
			}
			out = append(out, text[i+1:i+end])
			i += end - 1
		case ch == ' ' || ch == '\t' || ch == '\n' || ch == ';' || ch == '|' || ch == '&' || ch == '(' || ch == ')':
			word = false
		default:
			word = true
		}
	}
	return strings.Join(out, "\n")
}

// hexRe finds the ids that differ from run to run: state hashes, task ids.
var hexRe = regexp.MustCompile(`[0-9a-f]{16,}`)

// MatchOutput compares a transcript command's printed lines with the
// lines the guide shows. Lines are compared whole after trailing white
// space is trimmed; a run of 16 or more hex digits matches any such run
// (state hashes differ per run), and "…" in a shown line matches any
// text. It returns "" when they match, else what differs.
func MatchOutput(want []string, got string) string {
	have := strings.Split(strings.TrimRight(got, "\n"), "\n")
	if got == "" {
		have = nil
	}
	for i := 0; i < len(want) || i < len(have); i++ {
		switch {
		case i >= len(want):
			return fmt.Sprintf("printed more than the guide shows, from: %q", have[i])
		case i >= len(have):
			return fmt.Sprintf("the guide shows %q, the command printed no more", want[i])
		case !lineMatches(want[i], have[i]):
			return fmt.Sprintf("the guide shows\n\t%s\nthe command printed\n\t%s", want[i], have[i])
		}
	}
	return ""
}

func lineMatches(want, got string) bool {
	want = hexRe.ReplaceAllString(strings.TrimRight(want, " \t"), "\x00")
	got = hexRe.ReplaceAllString(strings.TrimRight(got, " \t"), "\x00")
	var re strings.Builder
	re.WriteString("^")
	for i, part := range strings.Split(want, "…") {
		if i > 0 {
			re.WriteString(".*")
		}
		re.WriteString(regexp.QuoteMeta(part))
	}
	re.WriteString("$")
	return regexp.MustCompile(re.String()).MatchString(got)
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return strings.TrimSpace(l)
}
