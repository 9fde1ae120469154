package mcptools_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/mcptools"
)

// BenchmarkToolCall measures one tool call's round trip from guest code:
// an MCP tool on a stdio server (this test binary's go-sdk edge server,
// "pid") next to a Go tool doing the same nothing, in the same run. Each
// op is one call inside a loop of 200 in one eval; the eval's own cost is
// spread over them.
//
//	go test -run '^$' -bench ToolCall -benchtime 20x ./mcptools
func BenchmarkToolCall(b *testing.B) {
	const per = 200
	var ts glovebox.Toolset
	ts.Func("go_pid", func() map[string]any {
		return map[string]any{"text": "1", "structured": nil, "error": false, "content": []any{}}
	})
	bb, err := bindB(b, &ts)
	if err != nil {
		b.Fatal(err)
	}
	defer bb()
	rt, err := glovebox.New(context.Background(), glovebox.Config{Tools: &ts, PoolSize: -1,
		Limits: glovebox.Limits{ToolCalls: 1 << 20, Timeout: time.Minute}})
	if err != nil {
		b.Fatal(err)
	}
	defer rt.Close()
	for _, fn := range []string{"go_pid", "pid"} {
		name := map[string]string{"go_pid": "go", "pid": "mcp-stdio"}[fn]
		b.Run(name, func(b *testing.B) {
			code := fmt.Sprintf("%d.times { %s }", per, fn)
			for b.Loop() {
				res, err := rt.Eval(context.Background(), code)
				if err != nil || res.Status != glovebox.StatusOK {
					b.Fatalf("%v %+v", err, res.Error)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*per)/1e3, "µs/call")
		})
	}
}

// bindB binds the edge server for a benchmark and returns its closer.
func bindB(b *testing.B, ts *glovebox.Toolset) (func(), error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	bd, err := mcptools.Bind(context.Background(), ts, mcptools.Config{},
		mcptools.Server{Name: "edge", Command: []string{exe}, Env: append(os.Environ(), "MCPTOOLS_TEST_SERVER=edge")})
	if err != nil {
		return nil, err
	}
	return func() { bd.Close() }, nil
}
