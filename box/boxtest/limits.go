package boxtest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gloveboxhq/glovebox/box"
)

// HostProcesses lists the host processes (but this one) whose command line holds one of
// marks.
func HostProcesses(marks ...string) []string {
	var out []string
	ms, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, m := range ms {
		b, err := os.ReadFile(m)
		if err != nil || filepath.Dir(m) == fmt.Sprintf("/proc/%d", os.Getpid()) {
			continue
		}
		line := strings.ReplaceAll(string(b), "\x00", " ")
		for _, mark := range marks {
			if strings.Contains(line, mark) {
				out = append(out, line+" ("+m+")")
				break
			}
		}
	}
	return out
}

// limits: the timeout and the resource limits.
func (s *suite) limits(t *testing.T) {
	// TimeoutKillsTree: at the timeout the whole tree is killed (a
	// backgrounded child included) and the Result says 124; nothing on the
	// host still names the run afterwards.
	s.sub(t, "TimeoutKillsTree", needs(Exec, Limits), func(t *testing.T, b box.Box) {
		tmp := walkableTemp(t)
		t.Setenv("TMPDIR", tmp)
		marker := fmt.Sprintf("%d", 900000+os.Getpid()%99999)
		res := run(t, b, box.Command{Shell: "(sleep " + marker + " &) ; sleep " + marker, Timeout: 2 * time.Second})
		if !res.TimedOut || res.ExitStatus != 124 {
			t.Fatalf("%+v", res)
		}
		if s.can(Host) {
			if left := HostProcesses("sleep "+marker, tmp); len(left) > 0 {
				t.Errorf("left behind after the timeout: %q", left)
			}
		}
	})
	// OutputCapped: stdout is kept and streamed up to Limits.Output and
	// marked truncated; stderr under the cap is whole.
	s.sub(t, "OutputCapped", needs(Exec, Limits), func(t *testing.T, b box.Box) {
		var streamed int
		res := run(t, b, box.Command{Shell: "head -c 5000000 /dev/zero; head -c 10 /dev/zero >&2", Limits: box.Limits{Output: 1000},
			Stream: func(s int, p []byte) {
				if s == 1 {
					streamed += len(p)
				}
			}})
		if len(res.Stdout) != 1000 || !res.StdoutTruncated || len(res.Stderr) != 10 || res.StderrTruncated || streamed != 1000 {
			t.Errorf("stdout %d trunc %v stderr %d streamed %d", len(res.Stdout), res.StdoutTruncated, len(res.Stderr), streamed)
		}
	})
	// MemoryHog: a program past Limits.Memory is stopped, and reported
	// as killed for memory (or failing its allocation) where a cgroup
	// holds the run; the same program under 1 GiB runs.
	s.sub(t, "MemoryHog", needs(Exec, Limits), func(t *testing.T, b box.Box) {
		hog := `x = bytearray(400 << 20); x[::4096] = b"a" * len(x[::4096]); print("alive")`
		res := run(t, b, box.Command{Argv: []string{"python3", "-c", hog}, Limits: box.Limits{Memory: 64 << 20}})
		if strings.Contains(res.Stdout, "alive") || res.ExitStatus == 0 {
			t.Fatalf("hog not stopped: %+v", res)
		}
		if hasEnforced(res, "memory:cgroup") && !res.KilledForMemory && !strings.Contains(res.Stderr, "MemoryError") {
			t.Errorf("cgroup present but not reported: %+v", res)
		}
		if res.KilledForMemory && res.ExitStatus != 137 {
			t.Errorf("killed for memory with exit %d, want 137", res.ExitStatus)
		}
		res = run(t, b, box.Command{Argv: []string{"python3", "-c", hog}, Limits: box.Limits{Memory: 1 << 30}})
		if res.KilledForMemory || res.Stdout != "alive\n" {
			t.Errorf("under 1 GiB: %+v", res)
		}
	})
	// PidsLimit: fork fails with EAGAIN before Limits.Pids processes, and
	// a shell fork bomb ends well before the timeout, its forks failing
	// (on stderr) or the sandbox left to finish the script.
	s.sub(t, "PidsLimit", needs(Exec, Limits), func(t *testing.T, b box.Box) {
		res := run(t, b, box.Command{Argv: []string{"python3", "-c", `
import os, errno
kids = []
try:
    while True:
        pid = os.fork()
        if pid == 0:
            import time; time.sleep(30); os._exit(0)
        kids.append(pid)
except OSError as e:
    print(errno.errorcode[e.errno], len(kids))
for k in kids: os.kill(k, 9)
for k in kids: os.waitpid(k, 0)
`}, Limits: box.Limits{Pids: 32}, Timeout: 60 * time.Second})
		if !hasEnforced(res, "pids:") {
			t.Skipf("no process limit on this host (enforced: %v)", res.Enforced)
		}
		var n int
		if _, err := fmt.Sscanf(res.Stdout, "EAGAIN %d\n", &n); err != nil || n <= 0 || n >= 32 || res.ExitStatus != 0 {
			t.Errorf("fork loop: %+v", res)
		}
		res = run(t, b, box.Command{Shell: "b() { b | b & }; b; sleep 1; echo survived", Timeout: 60 * time.Second, Limits: box.Limits{Pids: 32}})
		stopped := res.Stdout == "survived\n" || strings.Contains(res.Stderr, "fork") || strings.Contains(res.Stderr, "Resource temporarily unavailable")
		if res.TimedOut || !stopped {
			t.Errorf("fork bomb not stopped by the limit: timed out %v, stdout %q, stderr %q", res.TimedOut, res.Stdout, res.Stderr[:min(len(res.Stderr), 300)])
		}
	})
}
