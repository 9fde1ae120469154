package bench

import (
	"context"
	"strings"
	"testing"
)

// The data-flow rows run the support-desk program with and without labels
// against the real engine and report both figures (no timing is judged
// here): go test -run BenchDataflow -v ./internal/bench prints them.
func TestBenchDataflowRows(t *testing.T) {
	var rows [][]string
	row := func(met string, cols ...string) { rows = append(rows, append(cols, met)) }
	if err := benchDataflow(context.Background(), row, func(bool) string { return "" }); err != nil {
		t.Fatal(err)
	}
	if len(rows) != 3 {
		t.Fatalf("%d rows, want 3", len(rows))
	}
	for _, r := range rows {
		t.Log(strings.Join(r, " | "))
		if len(r) != 6 || !strings.Contains(r[2], "labelled") && !strings.Contains(r[2], "without labels") {
			t.Fatalf("row %q: want figure, result, baseline, ratio, target, met", r)
		}
	}
}
