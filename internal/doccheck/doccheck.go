// Package doccheck reads the fenced code blocks of the project's Markdown
// guides (README.md and docs/*.md) and holds each to code that is compiled
// and run, so a guide cannot drift from what works:
//
//   - a Go block is a verbatim excerpt of a checked-in file that CI builds
//     (`<!-- code: PATH -->` on a line before it), or is compiled as pasted
//     in a module of its own that points at the checkout with a replace
//     directive (a block with a package clause is compiled either way);
//   - a shell block (sh) runs for real, in order with the other blocks of
//     its guide, in a directory of its own, against the glovebox built
//     from the checkout, with a timeout and the exit status each command's
//     comment names ("exit 1"; 0 otherwise);
//   - a yaml or json block parses, and one marked `<!-- run: file NAME -->`
//     is written to NAME in that directory when the guide reaches it;
//   - a JSON-RPC transcript ("→"/"←" lines) marked
//     `<!-- run: stdio (COMMAND) -->` is played against COMMAND, each
//     answer compared with the one shown;
//   - other text blocks (output samples) are not code.
//
// Blocks that cannot run on a development machine or in CI are marked
// `<!-- run: skip (REASON) -->` and listed with their reason; see
// [Directive] for every mark. `make docs` runs it all (TestGuidesRun).
package doccheck

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// Block is one fenced code block.
type Block struct {
	File string // the Markdown file, as given to Read
	Line int    // 1-based line of the opening fence
	Lang string // the fence's info string ("go", "sh", ""), lower case
	// Source is the file named by a `<!-- code: PATH -->` comment on one
	// of the comment lines right before the fence, relative to the
	// repository root; "" when there is none.
	Source string
	// Run is the text of every `<!-- run: ... -->` comment right before
	// the fence, in order, joined by "; " ("" when there is none); see
	// [ParseDirective].
	Run   string
	Lines []string // the block's lines, without the fences
}

func (b Block) String() string { return fmt.Sprintf("%s:%d", b.File, b.Line) }

var (
	sourceRe  = regexp.MustCompile(`^\s*<!--\s*code:\s*(\S+)\s*-->\s*$`)
	runRe     = regexp.MustCompile(`^\s*<!--\s*run:\s*(.*?)\s*-->\s*$`)
	commentRe = regexp.MustCompile(`^\s*<!--.*-->\s*$`)
)

// Read returns the fenced blocks of one Markdown file. Fences are lines
// starting with three backquotes (after up to four spaces of indentation,
// as in list items); an unclosed fence is an error.
func Read(path string) ([]Block, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var (
		blocks   []Block
		cur      *Block
		comments []string // the comment lines right before this line
		n        int
	)
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		n++
		line := sc.Text()
		trimmed := strings.TrimLeft(line, " ")
		fence := strings.HasPrefix(trimmed, "```") && len(line)-len(trimmed) <= 4
		switch {
		case cur == nil && fence:
			cur = &Block{File: path, Line: n, Lang: strings.ToLower(strings.TrimSpace(strings.TrimPrefix(trimmed, "```")))}
			var runs []string
			for _, c := range comments {
				if m := sourceRe.FindStringSubmatch(c); m != nil {
					cur.Source = m[1]
				}
				if m := runRe.FindStringSubmatch(c); m != nil {
					runs = append(runs, m[1])
				}
			}
			cur.Run = strings.Join(runs, "; ")
		case cur != nil && fence && strings.TrimSpace(trimmed) == "```":
			blocks = append(blocks, *cur)
			cur = nil
		case cur != nil:
			cur.Lines = append(cur.Lines, line)
		}
		if cur == nil && commentRe.MatchString(line) {
			comments = append(comments, line)
		} else {
			comments = nil
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if cur != nil {
		return nil, fmt.Errorf("%s:%d: code block never closed", path, cur.Line)
	}
	return blocks, nil
}

// Guides lists README.md and every docs/*.md under root.
func Guides(root string) ([]string, error) {
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		return nil, err
	}
	return append([]string{filepath.Join(root, "README.md")}, docs...), nil
}

// Verbatim reports whether block is a verbatim excerpt of src: its lines,
// blank lines at its start and end left out, equal consecutive lines of
// src once each side's leading and trailing white space is trimmed (a
// guide indents a function's body less than the file does). Nothing may
// be left out in between, so the excerpt compiles where its file does:
// a guide that elides error handling shows code no reader can paste.
// It returns the block's first line that does not follow on from the
// lines before it at any place in src.
func Verbatim(block []string, src string) (missing string, ok bool) {
	var want []string
	for _, l := range block {
		want = append(want, strings.TrimSpace(l))
	}
	for len(want) > 0 && want[0] == "" {
		want = want[1:]
	}
	for len(want) > 0 && want[len(want)-1] == "" {
		want = want[:len(want)-1]
	}
	if len(want) == 0 {
		return "", false
	}
	var have []string
	for _, l := range strings.Split(src, "\n") {
		have = append(have, strings.TrimSpace(l))
	}
	best := 0 // the longest run of the block's lines matched anywhere
	for i := range have {
		n := 0
		for n < len(want) && i+n < len(have) && have[i+n] == want[n] {
			n++
		}
		if n == len(want) {
			return "", true
		}
		best = max(best, n)
	}
	return want[best], false
}

// linkRe finds Markdown links' targets: [text](target).
var linkRe = regexp.MustCompile(`\]\(([^)\s]+)\)`)
