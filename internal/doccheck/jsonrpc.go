package doccheck

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"github.com/gloveboxhq/glovebox/internal/spawn"
	"io"
	"os/exec"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"time"
)

// A JSON-RPC transcript is a text block of "→ MESSAGE" lines (what the
// client sends) and "← MESSAGE" lines (what the server answers), one
// message a line, as a stdio MCP session shows them.

// Exchange is one line of a JSON-RPC transcript.
type Exchange struct {
	Line int    // its index in the block's Lines
	Send bool   // "→": the client sends it; "←": the server must answer it
	JSON string // the message
}

// Exchanges parses a JSON-RPC transcript. Every line is blank or starts
// with "→ " or "← "; a line sent must be JSON as it stands (no "…"
// elisions), a line received may elide with "…" (see MatchJSON).
func Exchanges(lines []string) ([]Exchange, error) {
	var out []Exchange
	for i, l := range lines {
		switch {
		case strings.TrimSpace(l) == "":
		case strings.HasPrefix(l, "→ "):
			msg := strings.TrimPrefix(l, "→ ")
			if !json.Valid([]byte(msg)) {
				return nil, fmt.Errorf("line %d: a message sent must be JSON as it stands: %s", i+1, msg)
			}
			out = append(out, Exchange{Line: i, Send: true, JSON: msg})
		case strings.HasPrefix(l, "← "):
			msg := strings.TrimPrefix(l, "← ")
			if !json.Valid([]byte(msg)) {
				return nil, fmt.Errorf("line %d: a message received must be JSON (elide with a \"…\" string): %s", i+1, msg)
			}
			out = append(out, Exchange{Line: i, JSON: msg})
		default:
			return nil, fmt.Errorf("line %d: a JSON-RPC transcript line starts with \"→ \" or \"← \": %s", i+1, l)
		}
	}
	return out, nil
}

// MatchJSON compares a message received with the one a transcript shows.
// Objects must have the same keys and arrays the same length; a shown
// string "…" matches any value, and a "…" inside a shown string matches
// any text there. It returns "" when they match, else the path of the
// first difference.
func MatchJSON(want, got string) string {
	var w, g any
	dw := json.NewDecoder(strings.NewReader(want))
	dw.UseNumber()
	dg := json.NewDecoder(strings.NewReader(got))
	dg.UseNumber()
	if err := dw.Decode(&w); err != nil {
		return "the shown message is not JSON: " + err.Error()
	}
	if err := dg.Decode(&g); err != nil {
		return "the message received is not JSON: " + err.Error()
	}
	return matchValue("$", w, g)
}

func matchValue(path string, w, g any) string {
	if s, ok := w.(string); ok && s == "…" {
		return ""
	}
	switch w := w.(type) {
	case map[string]any:
		g, ok := g.(map[string]any)
		if !ok {
			return fmt.Sprintf("%s: shown an object, got %s", path, short(g))
		}
		var keys []string
		for k := range w {
			keys = append(keys, k)
		}
		for k := range g {
			if _, ok := w[k]; !ok {
				keys = append(keys, k)
			}
		}
		sort.Strings(keys)
		for _, k := range keys {
			wv, inW := w[k]
			gv, inG := g[k]
			switch {
			case !inW:
				return fmt.Sprintf("%s: a key the guide does not show: %q = %s", path, k, short(gv))
			case !inG:
				return fmt.Sprintf("%s: the guide shows %q, the message has no such key", path, k)
			}
			if d := matchValue(path+"."+k, wv, gv); d != "" {
				return d
			}
		}
		return ""
	case []any:
		g, ok := g.([]any)
		if !ok || len(g) != len(w) {
			return fmt.Sprintf("%s: shown %s, got %s", path, short(w), short(g))
		}
		for i := range w {
			if d := matchValue(fmt.Sprintf("%s[%d]", path, i), w[i], g[i]); d != "" {
				return d
			}
		}
		return ""
	case string:
		gs, ok := g.(string)
		if !ok {
			return fmt.Sprintf("%s: shown %q, got %s", path, w, short(g))
		}
		var re strings.Builder
		re.WriteString(`(?s)^`)
		for i, part := range strings.Split(w, "…") {
			if i > 0 {
				re.WriteString(`.*`)
			}
			re.WriteString(regexp.QuoteMeta(part))
		}
		re.WriteString(`$`)
		if !regexp.MustCompile(re.String()).MatchString(gs) {
			return fmt.Sprintf("%s: shown %q, got %q", path, w, gs)
		}
		return ""
	default:
		if fmt.Sprintf("%T %v", w, w) != fmt.Sprintf("%T %v", g, g) {
			return fmt.Sprintf("%s: shown %s, got %s", path, short(w), short(g))
		}
		return ""
	}
}

func short(v any) string {
	b, _ := json.Marshal(v)
	if len(b) > 200 {
		return string(b[:200]) + "…"
	}
	return string(b)
}

// session plays a JSON-RPC transcript against a command: each "→" line
// is written to its standard input, each "←" line must be the next
// message on its standard output, within the block's time limit.
func (r *Runner) session(ctx context.Context, b Block, d Directive, dir string, timeout time.Duration) error {
	ex, err := Exchanges(b.Lines)
	if err != nil {
		return fmt.Errorf("%s: %w", r.where(b, 0), err)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.Command("bash", "--noprofile", "--norc", "-c", d.Stdio)
	cmd.Dir, cmd.Env = dir, r.env()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := spawn.Start(cmd); err != nil {
		return fmt.Errorf("%s: %s: %w", r.where(b, 0), d.Stdio, err)
	}
	done := make(chan struct{})
	lines := make(chan string)
	go func() {
		defer close(lines)
		br := bufio.NewReaderSize(stdout, 1<<20)
		for {
			l, err := br.ReadString('\n')
			if l = strings.TrimRight(l, "\r\n"); l != "" {
				select {
				case lines <- l:
				case <-done:
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	at, msg := play(ctx, ex, stdin, lines, timeout)
	close(done)
	stdin.Close()
	syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	cmd.Wait()
	if msg == "" {
		return nil
	}
	return fmt.Errorf("%s: %s\n\tcommand: %s\n\tstderr:\n%s", r.where(b, at.Line+1), msg, d.Stdio, indent(tail(stderr.String(), 20)))
}

// play sends and receives a transcript's messages; it returns the
// exchange that failed and why ("" when none did).
func play(ctx context.Context, ex []Exchange, stdin io.Writer, lines <-chan string, timeout time.Duration) (Exchange, string) {
	for _, e := range ex {
		if e.Send {
			if _, err := io.WriteString(stdin, e.JSON+"\n"); err != nil {
				return e, fmt.Sprintf("sending the message: %v", err)
			}
			continue
		}
		select {
		case got, ok := <-lines:
			if !ok {
				return e, "the command ended before it answered:\n\t\t" + e.JSON
			}
			if diff := MatchJSON(e.JSON, got); diff != "" {
				return e, fmt.Sprintf("the answer differs from the guide: %s\n\tgot:\n\t\t%s", diff, got)
			}
		case <-ctx.Done():
			return e, fmt.Sprintf("no answer within the block's %v limit; the guide shows:\n\t\t%s", timeout, e.JSON)
		}
	}
	return Exchange{}, ""
}
