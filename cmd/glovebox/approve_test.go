package main

import (
	"bytes"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/creack/pty"
)

// ptyOutput collects what the REPL writes to its terminal.
type ptyOutput struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (p *ptyOutput) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.buf.Write(b)
}

// expect waits for s to appear after offset *from, then moves *from past it.
func (p *ptyOutput) expect(t *testing.T, from *int, s string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second) // a bound for a hung REPL, not a speed check
	for time.Now().Before(deadline) {
		p.mu.Lock()
		out := p.buf.String()
		p.mu.Unlock()
		if i := strings.Index(out[*from:], s); i >= 0 {
			*from += i + len(s)
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	t.Fatalf("the REPL never wrote %q; it wrote:\n%s", s, p.buf.String()[*from:])
}

// The REPL asks on its terminal before a call of a tool that needs
// approval; "n" denies (rescuable Glovebox::ToolDenied), "y" lets it run.
func TestREPLApprovalPrompt(t *testing.T) {
	cmd := exec.Command(bin, "repl", "--http-allow", "example.com", "--approve", "http_get")
	f, err := pty.Start(cmd)
	if err != nil {
		t.Skip("no pseudo-terminal: " + err.Error())
	}
	defer func() {
		f.Close()
		cmd.Process.Kill()
		cmd.Wait()
	}()
	var out ptyOutput
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := f.Read(buf)
			out.Write(buf[:n])
			if err != nil {
				return
			}
		}
	}()
	at := 0
	out.expect(t, &at, "rb> ")
	f.Write([]byte(`begin; http_get("http://example.com/\e[2J"); rescue Glovebox::ToolDenied => e; "denied: #{e.message}"; end` + "\r"))
	out.expect(t, &at, `approve http_get("http://example.com/\u001b[2J")? [y/N] `)
	f.Write([]byte("n\r"))
	out.expect(t, &at, `"denied: the user declined the call"`)
	out.expect(t, &at, "rb> ")
	// Approved, the call runs: here it fails inside the HTTP tool (no
	// network), which is not a denial.
	f.Write([]byte(`begin; http_get("http://example.com/"); rescue => e; e.class.name; end` + "\r"))
	out.expect(t, &at, "approve http_get(")
	f.Write([]byte("y\r"))
	out.expect(t, &at, "=> ")
	out.expect(t, &at, "rb> ")
	out.mu.Lock()
	tail := out.buf.String()
	out.mu.Unlock()
	if strings.Contains(tail[strings.LastIndex(tail, "approve http_get("):], "ToolDenied") {
		t.Fatalf("an approved call was denied:\n%s", tail)
	}
	f.Write([]byte("exit\r"))
}
