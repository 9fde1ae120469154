package glovebox_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/gloveboxhq/glovebox"
)

// rt is shared by the tests: the engine (compiled module, snapshot, pool)
// is made once per test process; Runtimes made by tests with their own
// tools or limits share it.
var rt *glovebox.Runtime

func TestMain(m *testing.M) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	var err error
	rt, err = glovebox.New(ctx, glovebox.Config{Progress: func(step string) func() {
		fmt.Fprintf(os.Stderr, "glovebox: %s...\n", step)
		start := time.Now()
		return func() {
			fmt.Fprintf(os.Stderr, "glovebox: %s: done in %v\n", step, time.Since(start).Round(time.Millisecond))
		}
	}})
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	rt.Close()
	os.Exit(code)
}

// eval runs code on rt and fails the test on a host error.
func eval(t testing.TB, r *glovebox.Runtime, code string) *glovebox.Result {
	t.Helper()
	res, err := r.Eval(context.Background(), code)
	if err != nil {
		t.Fatalf("Eval(%q): %v", code, err)
	}
	return res
}

func withLimits(t testing.TB, l glovebox.Limits) *glovebox.Runtime {
	t.Helper()
	r, err := rt.WithLimits(l)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func wantStatus(t testing.TB, res *glovebox.Result, want glovebox.Status) {
	t.Helper()
	if res.Status != want {
		t.Fatalf("status %s, want %s; error %+v; stdout %q", res.Status, want, res.Error, res.Stdout)
	}
}
