package bench

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gloveboxhq/glovebox/internal/spawn"
)

// TestBenchSuspendRows: the suspension rows are measured and printed in
// the form the checks parse (figure, then "p50 ... ms"); no figure is
// judged here.
func TestBenchSuspendRows(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts glovebox processes and writes states")
	}
	bin := filepath.Join(t.TempDir(), "glovebox")
	build := exec.Command("go", "build", "-o", bin, "github.com/gloveboxhq/glovebox/cmd/glovebox")
	if out, err := spawn.CombinedOutput(build); err != nil {
		t.Fatalf("building glovebox: %v\n%s", err, out)
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
	for _, want := range []string{"suspend idle session (1 MiB heap written) | p50 ", "resume idle session (1 MiB heap written) | p50 ", "state size, x = 1", "50 suspended sessions in a directory, one resumed at random (--states 50)"} {
		if !strings.Contains(all, want) {
			t.Errorf("no row %q", want)
		}
	}
}
