// Package doccheck reads the fenced code blocks of the project's Markdown
// guides (README.md and docs/*.md), so tests can hold every block to
// code that is compiled and run: a Go block must be an excerpt of a
// checked-in Example function or program, and a shell block may only use
// the CLI's real subcommands and flags.
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
	// Source is the file named by a `<!-- code: PATH -->` comment on the
	// line before the fence, relative to the repository root; "" when
	// there is none.
	Source string
	Lines  []string // the block's lines, without the fences
}

func (b Block) String() string { return fmt.Sprintf("%s:%d", b.File, b.Line) }

var sourceRe = regexp.MustCompile(`^\s*<!--\s*code:\s*(\S+)\s*-->\s*$`)

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
		blocks []Block
		cur    *Block
		prev   string
		n      int
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
			if m := sourceRe.FindStringSubmatch(prev); m != nil {
				cur.Source = m[1]
			}
		case cur != nil && fence && strings.TrimSpace(trimmed) == "```":
			blocks = append(blocks, *cur)
			cur = nil
		case cur != nil:
			cur.Lines = append(cur.Lines, line)
		}
		prev = line
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

// Excerpt reports whether every non-blank line of block, with its leading
// and trailing white space trimmed, appears in src in the same order
// (other lines may come between: a guide may leave out error handling).
// It returns the first line not found.
func Excerpt(block []string, src string) (missing string, ok bool) {
	var srcLines []string
	for _, l := range strings.Split(src, "\n") {
		srcLines = append(srcLines, strings.TrimSpace(l))
	}
	i := 0
	for _, l := range block {
		want := strings.TrimSpace(l)
		if want == "" {
			continue
		}
		for i < len(srcLines) && srcLines[i] != want {
			i++
		}
		if i == len(srcLines) {
			return want, false
		}
		i++
	}
	return "", true
}

// linkRe finds Markdown links' targets: [text](target).
var linkRe = regexp.MustCompile(`\]\(([^)\s]+)\)`)
