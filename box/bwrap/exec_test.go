package bwrap_test

import (
	"strings"
	"sync"
	"testing"

	"github.com/gloveboxhq/glovebox/box"
)

// TestCommandNotExecuted: a program that is not there exits 127 and one
// that is there but cannot be executed 126, with one stderr line naming
// it (the same as the gVisor box's), streamed as such; a command's own
// exit 1 and stderr are left alone.
func TestCommandNotExecuted(t *testing.T) {
	b := requiresBwrap(t)
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
	res := run(t, b, box.Command{Shell: "echo 'bwrap: execvp x: No such file or directory' >&2; exit 1"})
	if res.ExitStatus != 1 || !strings.HasPrefix(res.Stderr, "bwrap: execvp x") {
		t.Errorf("a command's own exit 1: %+v", res)
	}
}
