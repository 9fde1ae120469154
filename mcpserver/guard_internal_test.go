package mcpserver

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// A panicking handler becomes an error result, and the HTTP layer turns
// a panic into a 500, leaving the process serving.
func TestPanicsRecovered(t *testing.T) {
	s := &Server{log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	res, err := s.guard(func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		panic("boom")
	})(context.Background(), &mcp.CallToolRequest{Params: &mcp.CallToolParamsRaw{Name: "run_ruby"}})
	if err != nil || !res.IsError || res.StructuredContent == nil {
		t.Fatalf("got %+v, %v", res, err)
	}
}

func TestOriginAllowed(t *testing.T) {
	for _, tc := range []struct {
		origin string
		loop   bool
		want   bool
	}{
		{"http://localhost:3000", true, true},
		{"http://127.0.0.1", true, true},
		{"http://[::1]:8080", true, true},
		{"http://localhost:3000", false, false},
		{"https://evil.example", true, false},
		{"null", true, false},
		{"https://app.example.com", false, true}, // listed
	} {
		if got := originAllowed(tc.origin, tc.loop, []string{"https://app.example.com"}); got != tc.want {
			t.Errorf("%s loop=%v: %v", tc.origin, tc.loop, got)
		}
	}
}
