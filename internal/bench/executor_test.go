package bench

import (
	"context"
	"os"
	"strings"
	"testing"
)

// TestLoadExecutor prints the executor's load rows (`make loadtest`). It
// measures, so it runs only when asked: GLOVEBOX_LOADTEST=1. It fails
// when a row could not be measured (a request failed), never on a figure.
func TestLoadExecutor(t *testing.T) {
	if os.Getenv("GLOVEBOX_LOADTEST") == "" {
		t.Skip("a measurement, not a test: set GLOVEBOX_LOADTEST=1 (make loadtest)")
	}
	n := 0
	Executor(context.Background(), func(met string, cols ...string) {
		n++
		t.Logf("%s", strings.Join(cols, " | "))
		if strings.Contains(cols[1], "failed") || strings.Contains(cols[1], "not available") || strings.Contains(cols[1], "skipped") {
			t.Errorf("row %q: %s", cols[0], strings.Join(cols[1:], " "))
		}
	})
	if n != 12 {
		t.Errorf("%d rows, want 12 (3 figures × 1, 2 and 4 workers, the transport's floor and 2 PostgreSQL rows)", n)
	}
}
