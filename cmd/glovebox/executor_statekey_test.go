package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestExecutorStateKey: --state-key reads a 64-hex-digit file that is
// not readable by others (group-readable is fine: a Kubernetes Secret
// volume's mode 0440), names the key by its secret (so every executor
// reading the same file seals alike), and refuses a world-readable or
// malformed file.
func TestExecutorStateKey(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte(body), mode)
		os.Chmod(p, mode)
		return p
	}
	hex := strings.Repeat("ab", 32) + "\n"
	k1, err := executorKeyring([]string{write("a", hex, 0o440)})
	if err != nil {
		t.Fatal(err)
	}
	k2, err := executorKeyring([]string{write("b", hex, 0o600)})
	if err != nil || k1.SealingKey() != k2.SealingKey() {
		t.Errorf("the same secret in two files: ids %q and %v (%v)", k1.SealingKey(), k2, err)
	}
	if _, err := executorKeyring([]string{write("c", hex, 0o644)}); err == nil || !strings.Contains(err.Error(), "read by others") {
		t.Errorf("a world-readable key: %v", err)
	}
	if _, err := executorKeyring([]string{write("d", "short\n", 0o600)}); err == nil || !strings.Contains(err.Error(), "64 hex digits") {
		t.Errorf("a malformed key: %v", err)
	}
	if k, err := executorKeyring(nil); k != nil || err != nil {
		t.Errorf("no --state-key: %v %v, want none", k, err)
	}
}
