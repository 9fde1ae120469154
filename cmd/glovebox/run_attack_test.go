package main

import (
	"os"
	"path/filepath"
	"strings"
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
