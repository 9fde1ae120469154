package main

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestRunOutputsDirSymlinkEscape: a command given a writable mount of the
// --outputs-dir directory plants a symlink there to a host file outside it,
// then leaves a file of the same name in outputs/. Writing the outputs
// back followed the symlink and overwrote the host file; now every name
// resolves inside the directory and the escape is an error.
func TestRunOutputsDirSymlinkEscape(t *testing.T) {
	requiresBwrapCLI(t)
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	os.MkdirAll(filepath.Join(out, "sub"), 0o777)
	os.Chmod(out, 0o777)
	os.Chmod(filepath.Join(out, "sub"), 0o777)
	victim := filepath.Join(dir, "victim")
	os.WriteFile(victim, []byte("host data\n"), 0o644)
	victimDir := filepath.Join(dir, "victimdir")
	os.MkdirAll(victimDir, 0o755)
	script := "ln -s " + victim + " /data/x && ln -s " + victimDir + " /data/sub/d && mkdir -p outputs/sub/d && echo pwned > outputs/x && echo pwned > outputs/sub/d/y"
	_, errOut, code := run(t, "", "run", "--mount", out+":/data:rw", "--outputs-dir", out, "--", "sh", "-c", script)
	if b, _ := os.ReadFile(victim); string(b) != "host data\n" {
		t.Errorf("the host file outside --outputs-dir now holds %q (exit %d, %s)", b, code, errOut)
	}
	if _, err := os.Stat(filepath.Join(victimDir, "y")); err == nil {
		t.Errorf("a file was written through a symlinked directory out of --outputs-dir")
	}
	if code != 2 || !strings.Contains(errOut, "--outputs-dir") {
		t.Errorf("exit %d, stderr %q; want 2 and an --outputs-dir error", code, errOut)
	}
}

// TestRunSignalsCleanUp: SIGTERM (kill, timeout(1), a service manager) and
// SIGHUP (a closed terminal) ended glovebox run before the box removed its
// working directory and cgroup; now they cancel the run as Ctrl-C does and
// nothing of the run is left.
func TestRunSignalsCleanUp(t *testing.T) {
	requiresBwrapCLI(t)
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGHUP, syscall.SIGINT} {
		tmp := t.TempDir()
		cmd := exec.Command(bin, "run", "--", "sh", "-c", "echo ready; exec sleep 60")
		cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
		stdout, _ := cmd.StdoutPipe()
		var errb strings.Builder
		cmd.Stderr = &errb
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		if line != "ready\n" {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("%v: first line %q, stderr %q", sig, line, errb.String())
		}
		runs, _ := filepath.Glob(filepath.Join(tmp, "glovebox-run-*"))
		cmd.Process.Signal(sig)
		err := cmd.Wait()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 137 {
			t.Errorf("%v: %v, stderr %q; want exit 137 (the run was interrupted)", sig, err, errb.String())
		}
		if left, _ := os.ReadDir(tmp); len(left) != 0 {
			t.Errorf("%v: %d entries left in TMPDIR: %v", sig, len(left), left[0].Name())
		}
		for _, r := range runs {
			for _, pat := range []string{"/sys/fs/cgroup/*/" + filepath.Base(r), "/sys/fs/cgroup/*/*/" + filepath.Base(r), "/sys/fs/cgroup/*/*/*/" + filepath.Base(r)} {
				if m, _ := filepath.Glob(pat); len(m) > 0 {
					t.Errorf("%v: cgroup %s left", sig, m[0])
				}
			}
		}
	}
}
