package main

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestTwoProcesses builds the example and runs it: one process pauses at
// change_plan and exits, a second approves; the plan changes once, in
// the second.
func TestTwoProcesses(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "approval")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin).CombinedOutput()
	s := string(out)
	if err != nil || !strings.Contains(s, "waiting for approval: change_plan") || strings.Count(s, "change_plan ran") != 1 ||
		!strings.Contains(s, "changed: starter -> team") || !strings.Contains(s, "approved, ok") {
		t.Fatalf("%v\n%s", err, s)
	}
}
