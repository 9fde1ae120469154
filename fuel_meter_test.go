package glovebox_test

import (
	"testing"

	"github.com/gloveboxhq/glovebox"
)

// Tool calls neither refill nor drain the guest's fuel: a program that
// calls a tool in a loop runs out like any other, having used exactly its
// budget, and the fuel of a fixed number of calls is the same every run
// and grows with the number of calls (what is counted is the guest's side
// of each call; the host's time is not fuel).
func TestFuelWithToolCalls(t *testing.T) {
	var ts glovebox.Toolset
	ts.Func("ping", func() int { return 1 })
	r := newRuntime(t, glovebox.Config{Tools: &ts, Limits: glovebox.Limits{Fuel: 20_000_000, ToolCalls: 1 << 20}})
	res := eval(t, r, "loop { ping }")
	wantStatus(t, res, glovebox.StatusFuelExhausted)
	if res.FuelUsed != 20_000_000 {
		t.Fatalf("used %d of a 20,000,000 budget", res.FuelUsed)
	}
	big := withLimitsOf(t, r, glovebox.Limits{Fuel: 1 << 40})
	fuel := func(code string) uint64 {
		res := eval(t, big, code)
		wantStatus(t, res, glovebox.StatusOK)
		return res.FuelUsed
	}
	a, b := fuel("100.times { ping }"), fuel("100.times { ping }")
	c := fuel("200.times { ping }")
	if a == 0 || a != b || c <= a || float64(c)/float64(a) > 2.1 {
		t.Fatalf("100 calls %d then %d fuel, 200 calls %d", a, b, c)
	}
}

func withLimitsOf(t *testing.T, r *glovebox.Runtime, l glovebox.Limits) *glovebox.Runtime {
	t.Helper()
	v, err := r.WithLimits(l)
	if err != nil {
		t.Fatal(err)
	}
	return v
}
