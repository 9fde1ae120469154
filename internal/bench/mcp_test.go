package bench

import (
	"context"
	"strings"
	"testing"
)

// TestBenchMCPRows: the MCP rows are measured and printed (a round trip
// at each revision, the approval round trip); no figure is judged here.
func TestBenchMCPRows(t *testing.T) {
	var got []string
	row := func(met string, cols ...string) { got = append(got, strings.Join(cols, " | ")) }
	if err := benchMCP(context.Background(), 5, row); err != nil {
		t.Fatal(err)
	}
	all := strings.Join(got, "\n")
	t.Log("\n" + all)
	for _, want := range []string{"run_ruby round trip over HTTP at MCP 2025-11-25 | p50 ", "run_ruby round trip over HTTP at MCP 2026-07-28 | p50 ", "approval round trip at MCP 2026-07-28"} {
		if !strings.Contains(all, want) {
			t.Errorf("no row %q", want)
		}
	}
}
