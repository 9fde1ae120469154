package npmtest

import (
	"os"
	"os/exec"
	"testing"
)

func TestInstallEverything(t *testing.T) {
	bin := Bin(t, "@modelcontextprotocol/server-everything", "mcp-server-everything")
	if _, err := os.Stat(bin); err != nil {
		t.Fatal(err)
	}
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("node is not installed")
	}
}

func TestUnpinnedRefused(t *testing.T) {
	if _, err := Install(t.Context(), "left-pad"); err == nil {
		t.Fatal("an unpinned package was accepted")
	}
}
