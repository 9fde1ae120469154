package boxtest

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/gloveboxhq/glovebox/box"
)

// exec: what a command run for real sees and leaves.
func (s *suite) exec(t *testing.T) {
	s.sub(t, "ArgvAndShell", needs(Exec), func(t *testing.T, b box.Box) {
		res := run(t, b, box.Command{Argv: []string{"echo", "a b", "$HOME"}})
		if res.Stdout != "a b $HOME\n" || res.ExitStatus != 0 {
			t.Errorf("argv: %+v", res)
		}
		res = run(t, b, box.Command{Shell: "echo $((6*7)); exit 3"})
		if res.Stdout != "42\n" || res.ExitStatus != 3 {
			t.Errorf("shell: %+v", res)
		}
	})
	s.sub(t, "FilesStdinOutputs", needs(Exec), func(t *testing.T, b box.Box) {
		res := run(t, b, box.Command{
			Shell: "cat in/data.txt; tr a-z A-Z > outputs/up.txt; mkdir outputs/d; echo deep > outputs/d/x",
			Files: map[string][]byte{"in/data.txt": []byte("file content\n")},
			Stdin: []byte("from stdin"),
		})
		if res.Stdout != "file content\n" || res.ExitStatus != 0 {
			t.Fatalf("%+v", res)
		}
		if string(res.Outputs["up.txt"]) != "FROM STDIN" || string(res.Outputs["d/x"]) != "deep\n" {
			t.Errorf("outputs: %q", res.Outputs)
		}
		res = run(t, b, box.Command{Shell: "head -c 3000 /dev/zero > outputs/a; head -c 3000 /dev/zero > outputs/b", Limits: box.Limits{OutputFiles: 4000}})
		if !res.OutputsTruncated || len(res.Outputs) != 1 {
			t.Errorf("bounded outputs: truncated=%v n=%d", res.OutputsTruncated, len(res.Outputs))
		}
	})
	// EnvDefaultDeny: nothing of the host's environment reaches the
	// command; its own Env does.
	s.sub(t, "EnvDefaultDeny", needs(Exec), func(t *testing.T, b box.Box) {
		t.Setenv("GB_HOST_SECRET", "canary-8d1f")
		res := run(t, b, box.Command{Argv: []string{"env"}, Env: map[string]string{"MODE": "batch"}})
		if strings.Contains(res.Stdout, "canary-8d1f") || !strings.Contains(res.Stdout, "MODE=batch\n") {
			t.Errorf("env:\n%s", res.Stdout)
		}
	})
	// CredentialsNeverInResult: a credential reaches the command's
	// environment only; neither the Result nor a failing function's
	// error holds its value.
	s.sub(t, "CredentialsNeverInResult", needs(Exec), func(t *testing.T, b box.Box) {
		const canary = "tok-5b7c0e93"
		c := box.Command{
			Shell:       `test "$TOKEN" = tok-5b7c0e93 && echo has-token`,
			Credentials: map[string]func(context.Context) (string, error){"TOKEN": func(context.Context) (string, error) { return canary, nil }},
		}
		res := run(t, b, c)
		j, _ := json.Marshal(res)
		if res.Stdout != "has-token\n" || strings.Contains(string(j), canary) {
			t.Errorf("result: %s", j)
		}
		c.Credentials["TOKEN"] = func(context.Context) (string, error) { return "", fmt.Errorf("vault said %s", canary) }
		_, err := b.Run(context.Background(), c)
		if err == nil || strings.Contains(err.Error(), canary) || !strings.Contains(err.Error(), "TOKEN") {
			t.Errorf("credential error: %v", err)
		}
	})
	// CommandNotExecuted: a program that is not there exits 127 and one
	// that is there but cannot be executed 126, with one stderr line
	// naming it, streamed as such; a command's own exit 1 or 128 and its
	// stderr (looking like the sandbox program's own report) stay its own.
	s.sub(t, "CommandNotExecuted", needs(Exec), func(t *testing.T, b box.Box) {
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
		for status, line := range map[int]string{1: "bwrap: execvp x: No such file or directory", 128: "running container: x"} {
			res := run(t, b, box.Command{Shell: fmt.Sprintf("echo '%s' >&2; exit %d", line, status)})
			if res.ExitStatus != status || res.Stderr != line+"\n" {
				t.Errorf("a command's own exit %d: %+v", status, res)
			}
		}
	})
	// ReadOnlyRootAndHostUntouched: the box's root is read-only and
	// host files stay as they were; the working directory and /tmp take
	// writes.
	s.sub(t, "ReadOnlyRootAndHostUntouched", needs(Exec), func(t *testing.T, b box.Box) {
		sum := func() string {
			h := sha256.New()
			for _, f := range []string{"/usr/bin/env", "/etc/passwd"} {
				b, _ := os.ReadFile(f)
				h.Write(b)
			}
			return fmt.Sprintf("%x", h.Sum(nil))
		}
		before := sum()
		res := run(t, b, box.Command{Shell: `
for f in /usr/bin/env /usr/x /etc/passwd /x /bin/sh; do (echo pwned > $f) 2>/dev/null && echo "wrote $f"; done
cat /etc/shadow 2>/dev/null && echo "read shadow"
echo ok > /tmp/t && echo ok > here && echo writable`})
		if res.Stdout != "writable\n" {
			t.Errorf("%+v", res)
		}
		if sum() != before {
			t.Errorf("a host file changed")
		}
	})
	// NetworkNone: without an allowlist there is no network: no host
	// port, no outside address, no DNS.
	s.sub(t, "NetworkNone", needs(Exec), func(t *testing.T, b box.Box) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				c.Write([]byte("reached"))
				c.Close()
			}
		}()
		script := fmt.Sprintf(`
import socket
for addr in [("127.0.0.1", %d), ("1.1.1.1", 80)]:
    try:
        s = socket.create_connection(addr, timeout=2); print("connected", s.recv(10))
    except OSError as e: print("refused")
try:
    socket.getaddrinfo("example.com", 80); print("resolved")
except OSError: print("no dns")
`, ln.Addr().(*net.TCPAddr).Port)
		res := run(t, b, box.Command{Argv: []string{"python3", "-c", script}})
		if res.Stdout != "refused\nrefused\nno dns\n" {
			t.Errorf("network none: %+v", res)
		}
	})
}
