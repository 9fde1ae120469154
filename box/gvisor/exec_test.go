package gvisor_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/gloveboxhq/glovebox/box"
	"github.com/gloveboxhq/glovebox/box/gvisor"
)

// TestGVisorCommandNotExecuted: 127 for a program that is not there, 126
// for one that cannot be executed, with the bwrap box's stderr line
// (runsc's own report is neither the Result's nor streamed); a command's
// own exit 128 stays its own.
func TestGVisorCommandNotExecuted(t *testing.T) {
	b := requiresRunsc(t)
	files := map[string][]byte{"s.sh": []byte("echo hi\n")} // mode 0666
	for _, tc := range []struct {
		argv0  string
		status int
		stderr string
	}{
		{"nosuchcmd", 127, "glovebox: nosuchcmd: command not found\n"},
		{"./missing", 127, "glovebox: ./missing: command not found\n"},
		{"./s.sh", 126, "glovebox: ./s.sh: cannot execute: permission denied\n"},
		{"/work", 126, "glovebox: /work: cannot execute: permission denied\n"},
	} {
		var mu sync.Mutex
		var streamed strings.Builder
		res := run(t, b, box.Command{Argv: []string{tc.argv0}, Files: files, Stream: func(s int, p []byte) {
			mu.Lock()
			defer mu.Unlock()
			streamed.Write(p)
		}})
		if res.ExitStatus != tc.status || res.Stderr != tc.stderr || res.Stdout != "" {
			t.Errorf("%s: exit %d stderr %q, want %d %q", tc.argv0, res.ExitStatus, res.Stderr, tc.status, tc.stderr)
		}
		if streamed.String() != tc.stderr {
			t.Errorf("%s: streamed %q", tc.argv0, streamed.String())
		}
	}
	res := run(t, b, box.Command{Shell: "echo 'running container: x' >&2; exit 128"})
	if res.ExitStatus != 128 || res.Stderr != "running container: x\n" {
		t.Errorf("a command's own exit 128: %+v", res)
	}
}

// TestGVisorStartFailure: runsc failing to start the sandbox (here an
// unknown --platform) is an error wrapping box.ErrBackend that quotes
// runsc, not a Result with runsc's text as the command's stderr.
func TestGVisorStartFailure(t *testing.T) {
	requiresRunsc(t)
	b, err := gvisor.New(gvisor.Config{Platform: "no-such-platform"})
	if err != nil {
		t.Fatal(err)
	}
	res, err := b.Run(context.Background(), box.Command{Argv: []string{"true"}})
	if !errors.Is(err, box.ErrBackend) || res != nil {
		t.Fatalf("Run = %+v, %v; want an error wrapping ErrBackend", res, err)
	}
	if msg := err.Error(); !strings.Contains(msg, "unknown platform: no-such-platform") || !strings.Contains(msg, "runsc") {
		t.Errorf("error %q does not quote runsc", msg)
	}
}

// TestGVisorRunscGone: runsc vanishing between New and Run is an
// ErrBackend error, not a command exit status (127 is "command not
// found").
func TestGVisorRunscGone(t *testing.T) {
	requiresRunsc(t)
	p := filepath.Join(t.TempDir(), "runsc")
	if err := os.WriteFile(p, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := gvisor.New(gvisor.Config{Path: p})
	if err != nil {
		t.Fatal(err)
	}
	os.Remove(p)
	res, err := b.Run(context.Background(), box.Command{Argv: []string{"true"}})
	if !errors.Is(err, box.ErrBackend) || res != nil {
		t.Fatalf("Run = %+v, %v; want an error wrapping ErrBackend", res, err)
	}
}
