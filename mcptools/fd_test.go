package mcptools_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/internal/spawn/spawntest"
	"github.com/gloveboxhq/glovebox/mcptools"
)

// TestStdioServerInheritsNoDescriptors: a stdio server holds none of the
// descriptors this process has open without close-on-exec (a file and a
// directory): a shell records what it got, then becomes the edge server,
// which is looked at while it serves.
func TestStdioServerInheritsNoDescriptors(t *testing.T) {
	p := spawntest.Plant(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "probe")
	var ts glovebox.Toolset
	b, err := mcptools.Bind(context.Background(), &ts, mcptools.Config{}, mcptools.Server{Name: "fds",
		Command: []string{"/bin/sh", "-c", "{ " + p.Probe() + "; } >" + out + " 2>&1; exec \"$0\"", exe},
		Env:     []string{"PATH=/usr/bin:/bin", "MCPTOOLS_TEST_SERVER=fds"}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if h := p.Holders(); len(h) > 0 {
		t.Errorf("the running server holds planted descriptors: %q", h)
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	p.Check(t, "stdio server", string(got))
}
