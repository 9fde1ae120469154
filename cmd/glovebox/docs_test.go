package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/gloveboxhq/glovebox/internal/doccheck"
	"github.com/spf13/cobra"
)

// TestGuideCommandsExist runs every `glovebox …` command line of the
// guides' shell blocks through the CLI's own command tree: the subcommand
// must exist and every flag before the command's own arguments must be
// one it takes, so a renamed or removed flag fails here, not in a
// reader's terminal.
func TestGuideCommandsExist(t *testing.T) {
	guides, err := doccheck.Guides(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, g := range guides {
		blocks, err := doccheck.Read(g)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range blocks {
			if b.Lang != "sh" && b.Lang != "bash" && b.Lang != "" {
				continue
			}
			for i, line := range b.Lines {
				for _, argv := range commandLines(line) {
					checked++
					if msg := checkCommand(rootCmd(), argv); msg != "" {
						t.Errorf("%s:%d: %s\n\t%s", b.File, b.Line+1+i, msg, strings.TrimSpace(line))
					}
				}
			}
		}
	}
	if checked < 20 {
		t.Fatalf("only %d glovebox command lines found in the guides", checked)
	}
}

// commandLines finds glovebox invocations in a shell line: the words after
// each `glovebox` or `./glovebox` (or `/tmp/gb`), up to a pipe, `;`,
// `&&`, a redirection or a comment.
func commandLines(line string) [][]string {
	words := shellWords(line)
	var out [][]string
	for i := 0; i < len(words); i++ {
		w := words[i]
		if w != "glovebox" && w != "./glovebox" && w != "/tmp/gb" {
			continue
		}
		if i > 0 && (words[i-1] == "--" || words[i-1] == "-o" || words[i-1] == "mcp" || words[i-1] == "add") {
			continue // "claude mcp add glovebox -- glovebox mcp": the next occurrence is the command
		}
		var argv []string
		for _, a := range words[i+1:] {
			if a == "|" || a == ";" || a == "&&" || a == "||" || a == "&" || strings.HasPrefix(a, ">") || strings.HasPrefix(a, "<") || strings.HasPrefix(a, "2>") || a == "#" || a == "\\" {
				break
			}
			argv = append(argv, a)
		}
		out = append(out, argv)
	}
	return out
}

// shellWords splits a line at unquoted spaces, keeping quoted text as one
// word (quotes removed), and stops at an unquoted '#' comment.
func shellWords(s string) []string {
	var (
		words []string
		cur   strings.Builder
		in    bool
		quote rune
	)
	flush := func() {
		if in {
			words = append(words, cur.String())
			cur.Reset()
			in = false
		}
	}
	for _, r := range s {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			} else {
				cur.WriteRune(r)
			}
		case r == '\'' || r == '"':
			quote, in = r, true
		case r == ' ' || r == '\t':
			flush()
		case r == '#' && !in:
			flush()
			return words
		default:
			cur.WriteRune(r)
			in = true
		}
	}
	flush()
	return words
}

// checkCommand returns "" when argv names a subcommand of root and passes
// only flags it defines.
func checkCommand(root *cobra.Command, argv []string) string {
	cmd, rest, err := root.Find(argv)
	if err != nil {
		return err.Error()
	}
	if cmd == root && len(argv) > 0 && !strings.HasPrefix(argv[0], "-") {
		return "no subcommand " + argv[0]
	}
	interspersed := cmd.Name() != "run"
	for _, a := range rest {
		if a == "--" {
			break
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			if !interspersed {
				break // run: the command's own words from here on
			}
			continue
		}
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		var found bool
		if strings.HasPrefix(a, "--") {
			found = cmd.Flags().Lookup(name) != nil || cmd.InheritedFlags().Lookup(name) != nil || name == "help"
		} else if len(name) >= 1 {
			found = cmd.Flags().ShorthandLookup(name[:1]) != nil || name[:1] == "h"
		}
		if !found {
			return "glovebox " + cmd.Name() + " has no flag " + a
		}
	}
	return ""
}
