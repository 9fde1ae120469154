package bench

import (
	"context"
	"os"
	"strings"
	"testing"
)

// TestLoadFleetSession prints the fleet's rows (`make loadtest`): the
// session moving between replicas and the tool answer relayed by one,
// when asked (GLOVEBOX_LOADTEST=1); it fails when the row could not be
// measured, never on a figure.
func TestLoadFleetSession(t *testing.T) {
	if os.Getenv("GLOVEBOX_LOADTEST") == "" {
		t.Skip("a measurement, not a test: set GLOVEBOX_LOADTEST=1 (make loadtest)")
	}
	n := 0
	ExecutorFleet(context.Background(), func(met string, cols ...string) {
		n++
		t.Logf("%s", strings.Join(cols, " | "))
		if strings.Contains(cols[1], "failed") || strings.Contains(cols[1], "not available") || strings.Contains(cols[1], "skipped") {
			t.Errorf("row %q: %s", cols[0], strings.Join(cols[1:], " "))
		}
	})
	if n != 2 {
		t.Errorf("%d rows, want 2", n)
	}
}
