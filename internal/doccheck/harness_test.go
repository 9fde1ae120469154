package doccheck

import (
	"context"
	"fmt"
	"go/parser"
	"go/token"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestGuidesWellFormed reads every guide as the harness will (make docs),
// without running anything: each block has a language the harness knows,
// its run marks parse, its shell commands end, its data parses. It runs
// in make test, so a malformed block fails there first.
func TestGuidesWellFormed(t *testing.T) {
	guides, err := Guides(root)
	if err != nil {
		t.Fatal(err)
	}
	shell := 0
	for _, g := range guides {
		blocks, err := Read(g)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range blocks {
			d, err := ParseDirective(b.Run)
			if err != nil {
				t.Errorf("%v: %v", b, err)
			}
			switch b.Lang {
			case "sh":
				shell++
				if _, err := Commands(b.Lines); err != nil {
					t.Errorf("%v: %v", b, err)
				}
			case "yaml", "json":
				if err := parseData(b); err != nil {
					t.Error(err)
				}
			case "go", "ruby", "text":
			default:
				t.Errorf("%v: a block needs a language after its fence: sh, go, yaml, json, ruby or text (has %q)", b, b.Lang)
			}
			if d.Stdio != "" {
				if _, err := Exchanges(b.Lines); err != nil {
					t.Errorf("%v: %v", b, err)
				}
			}
			if d.File != "" && b.Lang == "sh" {
				t.Errorf("%v: a shell block runs; file is for data blocks", b)
			}
		}
	}
	if shell < 10 {
		t.Fatalf("only %d shell blocks in the guides: is the repository root right?", shell)
	}
}

func TestParseDirective(t *testing.T) {
	d, err := ParseDirective("skip (needs a key; and the network); timeout 90s")
	if err != nil || d.Skip != "needs a key; and the network" || d.Timeout != 90*time.Second {
		t.Errorf("got %+v, %v", d, err)
	}
	d, err = ParseDirective("background port 8443; file a/b.yaml")
	if err != nil || !d.Background || d.Port != 8443 || d.File != "a/b.yaml" {
		t.Errorf("got %+v, %v", d, err)
	}
	if d, err := ParseDirective(""); err != nil || d != (Directive{}) {
		t.Errorf("empty: got %+v, %v", d, err)
	}
	for _, bad := range []string{"skip", "skip because", "timeout soon", "timeout -1s", "background", "background port 0", "file /etc/x", "file ../x", "later"} {
		if _, err := ParseDirective(bad); err == nil {
			t.Errorf("%q was accepted", bad)
		}
	}
}

func TestCommands(t *testing.T) {
	block := []string{
		"# a comment line alone",
		"echo 'one' # => one",
		"",
		"false   # fails, exit 1",
		"glovebox eval -e '",
		"puts 1 # not a comment: inside quotes, exit 9",
		"'",
		"cat > f <<'EOF'",
		"x # exit 4",
		"EOF",
		"ls \\",
		"  -l",
		"for i in 1 2; do",
		"  echo $i",
		"done",
	}
	cmds, err := Commands(block)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		line, exit int
		value      string
		first      string
	}{
		{1, 0, "one", "echo 'one'"},
		{3, 1, "", "false"},
		{4, 0, "", "glovebox eval"},
		{7, 0, "", "cat > f"},
		{10, 0, "", "ls"},
		{12, 0, "", "for i"},
	}
	if len(cmds) != len(want) {
		t.Fatalf("got %d commands, want %d: %+v", len(cmds), len(want), cmds)
	}
	for i, w := range want {
		c := cmds[i]
		if c.Line != w.line || c.Exit != w.exit || c.Value != w.value || !strings.HasPrefix(c.Text, w.first) {
			t.Errorf("command %d: got line %d exit %d value %q text %q; want %+v", i, c.Line, c.Exit, c.Value, c.Text, w)
		}
	}
	if _, err := Commands([]string{"echo 'never closed"}); err == nil {
		t.Error("a block ending inside a quote was accepted")
	}
}

func TestTranscript(t *testing.T) {
	block := []string{
		"$ echo a; echo 'b",
		"c'",
		"a",
		"b",
		"c",
		"$ echo $?",
		"0",
		"",
	}
	if !IsTranscript(block) || IsTranscript([]string{"echo a"}) {
		t.Fatal("IsTranscript")
	}
	cmds, err := Commands(block)
	if err != nil {
		t.Fatal(err)
	}
	if len(cmds) != 2 || cmds[0].Text != "echo a; echo 'b\nc'" || strings.Join(cmds[0].Output, "|") != "a|b|c" || cmds[1].Exit != -1 || strings.Join(cmds[1].Output, "|") != "0" {
		t.Errorf("got %+v", cmds)
	}
	if _, err := transcript([]string{"output first", "$ echo"}); err == nil {
		t.Error("a transcript starting with output was accepted")
	}
}

func TestMatchOutput(t *testing.T) {
	want := []string{"state 9c239dbf20a6def8ecae09b991e5ee4c", "record in …/states", "=> 42"}
	if d := MatchOutput(want, "state 0123456789abcdef0123\nrecord in /root/.cache/states\n=> 42  \n"); d != "" {
		t.Errorf("a match was refused: %s", d)
	}
	for _, got := range []string{
		"state 0123456789abcdef0123\nrecord in /root/.cache/states\n=> 43\n",
		"state 0123456789abcdef0123\nrecord in /root/.cache/states\n",
		"state 0123456789abcdef0123\nrecord in /root/.cache/states\n=> 42\nmore\n",
		"state zz\nrecord in /root/.cache/states\n=> 42\n",
	} {
		if d := MatchOutput(want, got); d == "" {
			t.Errorf("%q matched", got)
		}
	}
	if d := MatchOutput(nil, ""); d != "" {
		t.Errorf("no output: %s", d)
	}
}

func TestWrap(t *testing.T) {
	for _, tc := range []struct {
		name  string
		lines []string
		first string // the block's first line, at 1+offset in the source
	}{
		{"file", []string{"package main", "", "func main() {}"}, "package main"},
		{"decls", []string{"import \"fmt\"", "", "func hello() { fmt.Println() }"}, "import \"fmt\""},
		{"statements", []string{"import (", "\t\"fmt\"", ")", "", "x := 1", "fmt.Println(x)"}, "import ("},
		{"bare statements", []string{"x := 1", "_ = x"}, "x := 1"},
	} {
		src, offset := Wrap(tc.lines)
		if _, err := parser.ParseFile(token.NewFileSet(), "x.go", src, 0); err != nil {
			t.Errorf("%s: does not parse: %v\n%s", tc.name, err, src)
		}
		if got := strings.Split(src, "\n")[offset]; got != tc.first {
			t.Errorf("%s: offset %d points at %q, want %q\n%s", tc.name, offset, got, tc.first, src)
		}
		if !strings.Contains(src, "func main()") {
			t.Errorf("%s: no main:\n%s", tc.name, src)
		}
	}
	// Statements after imports: every line keeps its number, unless the
	// import line ends in a comment and no blank line follows.
	for _, tc := range []struct {
		lines []string
		kept  bool
	}{
		{[]string{"import \"fmt\"", "", "fmt.Println(1)"}, true},
		{[]string{"import \"fmt\"", "fmt.Println(1)"}, true},
		{[]string{"import \"fmt\" // comment", "fmt.Println(1)"}, false},
	} {
		src, offset := Wrap(tc.lines)
		if _, err := parser.ParseFile(token.NewFileSet(), "x.go", src, 0); err != nil {
			t.Errorf("%q: does not parse: %v\n%s", tc.lines, err, src)
		}
		last := len(tc.lines) - 1 + offset
		if got := strings.Split(src, "\n")[last]; (got == tc.lines[len(tc.lines)-1]) != tc.kept {
			t.Errorf("%q: the last line is at %q (offset %d):\n%s", tc.lines, got, offset, src)
		}
	}
}

// TestRunnerGuide runs a small guide through the Runner: blocks share the
// guide's directory in order, a data block is written for the next, $?
// is the reader's, a skip is reported, a wrong exit status and a
// transcript that differs fail naming file:line and the command, a slow
// block fails at its timeout, and a background server is reached by a
// later block and stopped at the end.
func TestRunnerGuide(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	dir := t.TempDir()
	guide := filepath.Join(dir, "guide.md")
	text := strings.Join([]string{
		"# A guide",
		"<!-- run: file conf/a.yaml -->",
		"```yaml",
		"a: 1",
		"```",
		"```sh",
		"grep -q 'a: 1' conf/a.yaml",
		"false            # exit 1",
		"test $? = 1",
		"echo made > made.txt",
		"```",
		"<!-- run: skip (needs a service absent here) -->",
		"```sh",
		"exit 3",
		"```",
		"```sh",
		"$ cat made.txt",
		"made",
		"$ (exit 2); echo $?",
		"2",
		"```",
		"```sh",
		"true             # says exit 1, exits 0",
		"```",
		"```sh",
		"$ echo made",
		"unmade",
		"```",
		"<!-- run: timeout 1s -->",
		"```sh",
		"sleep 30",
		"```",
		fmt.Sprintf("<!-- run: background port %d -->", port),
		"```sh",
		fmt.Sprintf("exec python3 -m http.server --bind 127.0.0.1 %d", port),
		"```",
		"```sh",
		fmt.Sprintf("python3 -c 'import urllib.request as u; print(\"=> \" + u.urlopen(\"http://127.0.0.1:%d/made.txt\").read().decode())'   # => made", port),
		"```",
		"```text",
		"not code",
		"```",
		"```ini",
		"x=1",
		"```",
		"<!-- run: stdio (cat) -->",
		"```text",
		"→ {\"id\":1,\"method\":\"ping\",\"params\":{\"n\":[1,2]}}",
		"← {\"id\":1,\"method\":\"…\",\"params\":{\"n\":[1,2]}}",
		"```",
		"<!-- run: stdio (cat); timeout 2s -->",
		"```text",
		"→ {\"id\":2}",
		"← {\"id\":3}",
		"```",
		"<!-- run: stdio (cat >/dev/null); timeout 1s -->",
		"```text",
		"→ {\"id\":2}",
		"← {\"id\":2}",
		"```",
	}, "\n") + "\n"
	if err := os.WriteFile(guide, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	r := &Runner{Root: dir, Bin: t.TempDir(), Work: t.TempDir(), Timeout: 20 * time.Second}
	start := time.Now()
	reps, err := r.Guide(context.Background(), guide)
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 15*time.Second {
		t.Errorf("the guide took %v: the timeout did not stop the slow block", took)
	}
	want := []struct {
		kind string
		err  string // "" for none; else text the error must hold
	}{
		{KindFile, ""},
		{KindRun, ""},
		{KindSkipped, ""},
		{KindTranscript, ""},
		{KindRun, "guide.md:23: exit 0, want 1"},
		{KindTranscript, "guide.md:26: the guide shows\n\tunmade"},
		{KindRun, "guide.md:31: still running after the block's 1s limit"},
		{KindServer, ""},
		{KindRun, ""},
		{KindText, ""},
		{"", "it has ini"},
		{KindSession, ""},
		{KindSession, "guide.md:54: the answer differs from the guide: $.id: shown 3, got 2"},
		{KindSession, "guide.md:59: no answer within the block's 1s limit"},
	}
	if len(reps) != len(want) {
		t.Fatalf("got %d reports, want %d", len(reps), len(want))
	}
	for i, w := range want {
		rep := reps[i]
		if rep.Kind != w.kind {
			t.Errorf("block %d (line %d): kind %q, want %q", i, rep.Block.Line, rep.Kind, w.kind)
		}
		switch {
		case w.err == "" && rep.Err != nil:
			t.Errorf("block %d (line %d): %v", i, rep.Block.Line, rep.Err)
		case w.err != "" && (rep.Err == nil || !strings.Contains(rep.Err.Error(), w.err)):
			t.Errorf("block %d (line %d): got error %v, want one with %q", i, rep.Block.Line, rep.Err, w.err)
		}
	}
	if e := reps[4].Err; e != nil && !strings.Contains(e.Error(), "command: \t\ttrue") {
		t.Errorf("the failure does not quote the command: %v", e)
	}
	if reps[2].Skip != "needs a service absent here" {
		t.Errorf("skip reason %q", reps[2].Skip)
	}
	if c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second); err == nil {
		c.Close()
		t.Error("the background server still listens after the guide")
	}
	if s := Summary(dir, reps); !strings.Contains(s, "guide.md:13 (sh): needs a service absent here") || !strings.Contains(s, "failed: 6") {
		t.Errorf("summary:\n%s", s)
	}
}

func TestMatchJSON(t *testing.T) {
	want := `{"id":1,"result":{"instructions":"…","text":"=> … done","n":[18446744073709551616,1.5]}}`
	if d := MatchJSON(want, `{"result":{"n":[18446744073709551616,1.5],"text":"=> 42 and\nmore done","instructions":{"any":"thing"}},"id":1}`); d != "" {
		t.Errorf("a match was refused: %s", d)
	}
	for got, path := range map[string]string{
		`{"id":1,"result":{"instructions":"","text":"=> x done","n":[18446744073709551617,1.5]}}`:       "$.result.n[0]",
		`{"id":1,"result":{"instructions":"","text":"=> x","n":[18446744073709551616,1.5]}}`:            "$.result.text",
		`{"id":1,"result":{"instructions":"","text":"=> x done","n":[1]}}`:                              "$.result.n",
		`{"id":1,"result":{"instructions":"","text":"=> x done","n":[18446744073709551616,1.5],"x":0}}`: `$.result: a key the guide does not show: "x"`,
		`{"id":1,"result":{"text":"=> x done","n":[18446744073709551616,1.5]}}`:                         `$.result: the guide shows "instructions"`,
		`{"id":"1","result":{"instructions":"","text":"=> x done","n":[18446744073709551616,1.5]}}`:     "$.id",
	} {
		if d := MatchJSON(want, got); !strings.HasPrefix(d, path) {
			t.Errorf("%s: got %q, want a difference at %s", got, d, path)
		}
	}
	if _, err := Exchanges([]string{"→ {not json}"}); err == nil {
		t.Error("a message sent that is not JSON was accepted")
	}
	if _, err := Exchanges([]string{"→ {}", "say hello"}); err == nil {
		t.Error("a line without an arrow was accepted")
	}
}
