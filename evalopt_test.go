package glovebox_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/iotest"

	"github.com/gloveboxhq/glovebox"
)

// TestEvalWithInput: WithStdin is the guest's $stdin, STDIN and gets;
// WithArgs its ARGV; input over the limits fails with ErrInvalidInput and
// runs nothing.
func TestEvalWithInput(t *testing.T) {
	ctx := context.Background()
	res, err := rt.EvalWith(ctx, `[$stdin.gets, $stdin.read, STDIN.equal?($stdin), ARGV, $stdin.read.encoding.name]`,
		glovebox.WithStdin(strings.NewReader("one\ntwo é\n")), glovebox.WithArgs("a", "", "b c"))
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, res, glovebox.StatusOK)
	if got := res.Value.([]any); got[0] != "one\n" || got[1] != "two é\n" || got[2] != true ||
		len(got[3].([]any)) != 3 || got[3].([]any)[2] != "b c" || got[4] != "UTF-8" {
		t.Fatalf("got %#v", got)
	}
	// Binary input arrives byte for byte.
	bin := []byte{0, 0xff, 0x80, '\n', 0x1b}
	res, err = rt.EvalWith(ctx, `$stdin.read.bytes`, glovebox.WithStdin(bytes.NewReader(bin)))
	if err != nil || len(res.Value.([]any)) != len(bin) || res.Value.([]any)[1] != int64(0xff) && res.Value.([]any)[1] != 255 {
		t.Fatalf("binary: %v %#v", err, res.Value)
	}
	// Kernel#gets, with no ARGV, reads standard input.
	res, err = rt.EvalWith(ctx, `gets`, glovebox.WithStdin(strings.NewReader("l1\nl2")))
	wantValue := func(res *glovebox.Result, err error, want string) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		wantStatus(t, res, glovebox.StatusOK)
		if res.Value != want {
			t.Fatalf("value %#v, want %q", res.Value, want)
		}
	}
	wantValue(res, err, "l1\n")
	// No options: empty input and ARGV.
	res, err = rt.Eval(ctx, `$stdin.read + ARGV.inspect`)
	wantValue(res, err, "[]")
	// Limits: Stdin, MaxArgs, MaxArgBytes, a failing reader.
	small := withLimits(t, glovebox.Limits{Stdin: 4})
	res, err = small.EvalWith(ctx, `$stdin.read`, glovebox.WithStdin(strings.NewReader("1234")))
	wantValue(res, err, "1234")
	for _, opt := range []glovebox.EvalOption{
		glovebox.WithStdin(strings.NewReader("12345")),
		glovebox.WithStdin(iotest.ErrReader(errors.New("disk gone"))),
		glovebox.WithArgs(make([]string, glovebox.MaxArgs+1)...),
		glovebox.WithArgs(strings.Repeat("x", glovebox.MaxArgBytes/2), strings.Repeat("y", glovebox.MaxArgBytes/2+1)),
	} {
		if res, err := small.EvalWith(ctx, `1`, opt); !errors.Is(err, glovebox.ErrInvalidInput) || res != nil {
			t.Errorf("got %v, %v; want ErrInvalidInput", res, err)
		}
	}
	if _, err := rt.WithLimits(glovebox.Limits{Stdin: -1}); !errors.Is(err, glovebox.ErrInvalidLimits) {
		t.Fatalf("negative Stdin: %v", err)
	}
	// A session: each eval's input is its own.
	s, err := rt.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	res, err = s.EvalWith(ctx, `$first = $stdin; $stdin.read + ARGV.join`, glovebox.WithStdin(strings.NewReader("in1 ")), glovebox.WithArgs("x"))
	wantValue(res, err, "in1 x")
	res, err = s.Eval(ctx, `[$stdin.read, ARGV.join, $first.equal?($stdin)].inspect`)
	wantValue(res, err, `["", "", false]`)
}

// syncBuffer is a bytes.Buffer safe for the eval goroutine to write while
// a tool reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestEvalWithOutputStreams: the writers see output while the eval runs
// (a tool the guest calls after printing finds it there), exactly the
// bytes the Result keeps.
func TestEvalWithOutputStreams(t *testing.T) {
	var out, errw syncBuffer
	var seen string
	var ts glovebox.Toolset
	ts.Func("peek", func() string { seen = out.String() + "|" + errw.String(); return "ok" })
	r := newRuntime(t, glovebox.Config{Tools: &ts, Limits: glovebox.Limits{Stdout: 10}})
	res, err := r.EvalWith(context.Background(), `print "before"; $stderr.print "e1"; peek; print "after-and-more"; 1`, glovebox.WithOutput(&out, &errw))
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, res, glovebox.StatusOK)
	if seen != "before|e1" {
		t.Fatalf("during the eval the writers had %q", seen)
	}
	if out.String() != "beforeafte" || !res.StdoutTruncated || !strings.HasPrefix(res.Stdout, "beforeafte\n[glovebox:") || errw.String() != "e1" || res.Stderr != "e1" {
		t.Fatalf("writers %q %q; result %q %q", out.String(), errw.String(), res.Stdout, res.Stderr)
	}
	// Nil writers are allowed; output still lands in the Result.
	res, err = r.EvalWith(context.Background(), `print "x"; 1`, glovebox.WithOutput(nil, io.Discard))
	if err != nil || res.Stdout != "x" {
		t.Fatalf("%v %q", err, res.Stdout)
	}
}

// TestToolPanicLogsOneLine: a panicking tool is one concise Error line
// (value and place); the stack is at Debug level only.
func TestToolPanicLogsOneLine(t *testing.T) {
	for _, level := range []slog.Level{slog.LevelInfo, slog.LevelDebug} {
		var logs bytes.Buffer
		var ts glovebox.Toolset
		ts.Func("boom", func() int { panic("kaboom\nsecond line") })
		r := newRuntime(t, glovebox.Config{Tools: &ts, Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: level}))})
		wantStatus(t, eval(t, r, `boom rescue 1`), glovebox.StatusOK)
		lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
		var errLines []string
		for _, l := range lines {
			if strings.Contains(l, "level=ERROR") {
				errLines = append(errLines, l)
			}
		}
		if len(errLines) != 1 || !strings.Contains(errLines[0], "kaboom") || strings.Contains(errLines[0], "second line") ||
			!strings.Contains(errLines[0], "evalopt_test.go") || strings.Contains(errLines[0], "goroutine") {
			t.Fatalf("level %v: error lines %q", level, errLines)
		}
		hasStack := strings.Contains(logs.String(), "goroutine")
		if hasStack != (level == slog.LevelDebug) {
			t.Fatalf("level %v: stack logged %v:\n%s", level, hasStack, logs.String())
		}
	}
}

// TestNewRefusesMissingMountDir: a mount whose host directory is missing
// or a file fails New with ErrInvalidMount.
func TestNewRefusesMissingMountDir(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	os.WriteFile(file, nil, 0o644)
	for _, host := range []string{filepath.Join(dir, "missing"), file} {
		_, err := glovebox.New(context.Background(), glovebox.Config{Mounts: []glovebox.Mount{{HostPath: host, GuestPath: "/data"}}})
		if !errors.Is(err, glovebox.ErrInvalidMount) || !strings.Contains(err.Error(), host) {
			t.Errorf("%s: %v", host, err)
		}
	}
}
