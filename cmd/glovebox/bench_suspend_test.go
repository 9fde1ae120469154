package main

import (
	"context"
	"strings"
	"testing"
)

// TestBenchSuspendRows: the suspension rows are measured and printed in
// the form the checks parse (figure, then "p50 ... ms"); no figure is
// judged here.
func TestBenchSuspendRows(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts glovebox processes and writes states")
	}
	selfExe = func() (string, error) { return bin, nil }
	var got []string
	row := func(met string, cols ...string) { got = append(got, strings.Join(cols, " | ")) }
	yes := func(ok bool) string { return "-" }
	if err := benchSuspend(context.Background(), 20, 50, row, yes); err != nil {
		t.Fatal(err)
	}
	all := strings.Join(got, "\n")
	t.Log("\n" + all)
	for _, want := range []string{"suspend idle session (1 MiB heap written) | p50 ", "resume idle session (1 MiB heap written) | p50 ", "state size, x = 1", "50 suspended sessions"} {
		if !strings.Contains(all, want) {
			t.Errorf("no row %q", want)
		}
	}
}
