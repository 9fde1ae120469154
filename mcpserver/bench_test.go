package mcpserver_test

import (
	"context"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/mcpserver"
)

// BenchmarkRunRuby measures one run_ruby round trip (a fresh VM, "1+1")
// through each transport, next to the in-process eval it wraps, so the
// protocol's cost is the difference:
//
//	go test -run '^$' -bench RunRuby -benchtime 200x ./mcpserver
func BenchmarkRunRuby(b *testing.B) {
	// No tools and no pool, as `glovebox mcp` runs without flags.
	rt, err := glovebox.New(context.Background(), glovebox.Config{PoolSize: -1})
	if err != nil {
		b.Fatal(err)
	}
	defer rt.Close()
	b.Run("in-process", func(b *testing.B) {
		for b.Loop() {
			if res, err := rt.Eval(context.Background(), "1+1"); err != nil || res.Status != glovebox.StatusOK {
				b.Fatal(err, res)
			}
		}
	})
	roundTrips := func(b *testing.B, cs *mcp.ClientSession) {
		ctx := context.Background()
		p := &mcp.CallToolParams{Name: mcpserver.ToolRun, Arguments: map[string]any{"code": "1+1"}}
		for b.Loop() {
			if res, err := cs.CallTool(ctx, p); err != nil || res.IsError {
				b.Fatal(err, res)
			}
		}
	}
	b.Run("stdio", func(b *testing.B) {
		// The real `glovebox mcp` process, over its standard input and output.
		bin := filepath.Join(b.TempDir(), "glovebox")
		if out, err := exec.Command("go", "build", "-o", bin, "../cmd/glovebox").CombinedOutput(); err != nil {
			b.Fatalf("%v\n%s", err, out)
		}
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil).Connect(context.Background(),
			&mcp.CommandTransport{Command: exec.Command(bin, "mcp")}, nil)
		if err != nil {
			b.Fatal(err)
		}
		defer cs.Close()
		roundTrips(b, cs)
	})
	b.Run("http", func(b *testing.B) {
		s, err := mcpserver.New(mcpserver.Options{Runtime: rt})
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		url, _ := serveHTTP(b, s, "secret")
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil).Connect(context.Background(),
			&mcp.StreamableClientTransport{Endpoint: url, HTTPClient: bearer("secret")}, nil)
		if err != nil {
			b.Fatal(err)
		}
		defer cs.Close()
		roundTrips(b, cs)
	})
}
