// Package ruby holds the Ruby gem (see README.md); this file runs its
// minitest suite from `go test ./...` (and so `make test`), against a
// glovebox binary built from this checkout.
package ruby

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/internal/npmtest"
)

// TestRubyGem builds cmd/glovebox and runs `ruby -Ilib -Itest
// test/all.rb`, which starts real executors on loopback. It skips when
// ruby, its minitest or bubblewrap (the executor's run backend) is
// missing, saying which.
func TestRubyGem(t *testing.T) {
	rb, err := exec.LookPath("ruby")
	if err != nil {
		t.Skip("ruby is not installed: install ruby and ruby-minitest (Debian) to run the gem's tests")
	}
	if err := exec.Command(rb, "-e", `require "minitest"`).Run(); err != nil {
		t.Skip("ruby's minitest is missing: install ruby-minitest (Debian) or `gem install minitest`")
	}
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Skip("bubblewrap is not installed: the gem's Box tests run commands on an executor with the bwrap backend")
	}
	bin := filepath.Join(t.TempDir(), "glovebox")
	build := exec.Command("go", "build", "-o", bin, "../cmd/glovebox")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ../cmd/glovebox: %v\n%s", err, out)
	}
	cmd := exec.Command(rb, "-w", "-Ilib", "-Itest", "test/all.rb")
	cmd.Env = append(os.Environ(), "GLOVEBOX_BIN="+bin)
	// The MCP tests bind a real npm server: the pinned one, installed
	// here when npm is there (without it they skip, saying so).
	if _, err := exec.LookPath("npm"); err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		dir, err := npmtest.Install(ctx, "@modelcontextprotocol/server-memory")
		cancel()
		if err != nil {
			t.Fatalf("installing the MCP server the gem's tests bind: %v", err)
		}
		cmd.Env = append(cmd.Env, "GLOVEBOX_TEST_MCP_MEMORY="+filepath.Join(dir, "node_modules", ".bin", "mcp-server-memory"))
	}
	out, err := cmd.CombinedOutput()
	t.Logf("%s", out)
	if err != nil {
		t.Fatalf("the gem's tests failed: %v", err)
	}
}

// TestGemMemoryFloor: the floor the gem refuses memory: limits below
// (Glovebox::Exposure::MEMORY_FLOOR) is the Runtime's MemoryFloor for
// the image this checkout pins, so a Sandbox refuses at construction
// exactly what an eval would refuse.
func TestGemMemoryFloor(t *testing.T) {
	rb, err := exec.LookPath("ruby")
	if err != nil {
		t.Skip("ruby is not installed")
	}
	out, err := exec.Command(rb, "-Ilib", "-e", `require "glovebox"; print Glovebox::Exposure::MEMORY_FLOOR`).CombinedOutput()
	if err != nil {
		t.Fatalf("ruby: %v\n%s", err, out)
	}
	gem, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
	if err != nil {
		t.Fatalf("MEMORY_FLOOR %q: %v", out, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	rt, err := glovebox.New(ctx, glovebox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	if floor := rt.MemoryFloor(); gem != floor {
		t.Fatalf("Glovebox::Exposure::MEMORY_FLOOR is %d; the Runtime's MemoryFloor is %d: update ruby/lib/glovebox/exposure.rb", gem, floor)
	}
}
