// Limits: wall clock, fuel, memory and cancellation, each hit for real.

package glovebox_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gloveboxhq/glovebox"
)

// Once the guest was refused memory the eval ends memory_limit, even if it
// rescued; a NoMemoryError it raised itself is an ordinary error.
func TestMemoryLimitIsSticky(t *testing.T) {
	res := eval(t, rt, `a = []; begin; loop { a << ("x" * 10_000_000) }; rescue NoMemoryError; a = nil; end; :survived`)
	wantStatus(t, res, glovebox.StatusMemoryLimit)
	res = eval(t, rt, `raise NoMemoryError, "fake"`)
	wantStatus(t, res, glovebox.StatusError)
}

func TestTimeoutEndlessLoop(t *testing.T) {
	r := withLimits(t, glovebox.Limits{Timeout: 300 * time.Millisecond})
	res := eval(t, r, "i = 0\nloop { i += 1 }")
	wantStatus(t, res, glovebox.StatusTimeout)
	if res.Error.Class != "Glovebox::Timeout" || !errors.Is(res.Err(), context.DeadlineExceeded) {
		t.Fatalf("error %+v, Err %v", res.Error, res.Err())
	}
}

func TestTimeoutPreemptsRegexBacktracking(t *testing.T) {
	r := withLimits(t, glovebox.Limits{Timeout: 500 * time.Millisecond})
	// Ruby memoizes most backtracking since 3.2; a lookahead defeats that.
	res := eval(t, r, `Regexp.timeout = nil; /\A(?=(a+)+\z)/.match?("a" * 40 + "b")`)
	wantStatus(t, res, glovebox.StatusTimeout)
}

func TestSleepHonoursTimeout(t *testing.T) {
	r := withLimits(t, glovebox.Limits{Timeout: time.Second})
	start := time.Now()
	res := eval(t, r, "sleep 30")
	wantStatus(t, res, glovebox.StatusTimeout)
	// A correctness bound, not a benchmark: without the poll_oneoff
	// override this takes 30 s.
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("sleep 30 under a 1 s timeout took %v", d)
	}
}

func TestSleepShort(t *testing.T) {
	res := eval(t, rt, "t = Process.clock_gettime(Process::CLOCK_MONOTONIC); sleep 0.05; Process.clock_gettime(Process::CLOCK_MONOTONIC) - t")
	wantStatus(t, res, glovebox.StatusOK)
	if d, _ := res.Value.(float64); d < 0.04 {
		t.Fatalf("slept %v s, want about 0.05", res.Value)
	}
}

func TestFuelExhausted(t *testing.T) {
	r := withLimits(t, glovebox.Limits{Fuel: 5_000_000})
	res := eval(t, r, "loop {}")
	wantStatus(t, res, glovebox.StatusFuelExhausted)
	if res.FuelUsed < 4_000_000 {
		t.Fatalf("fuel used %d", res.FuelUsed)
	}
}

func TestFuelIsDeterministic(t *testing.T) {
	code := "i = 0; while i < 10_000; i += 1; end; i"
	r := withLimits(t, glovebox.Limits{Fuel: 1 << 40})
	a, b := eval(t, r, code), eval(t, r, code)
	if a.FuelUsed == 0 || a.FuelUsed != b.FuelUsed {
		t.Fatalf("fuel %d then %d for the same program", a.FuelUsed, b.FuelUsed)
	}
}

// TestFuelBudgetPicksMeteredCode checks that only evals with a fuel
// budget run the guest compiled with fuel metering: a Runtime without a
// budget reports no fuel, its view with one counts and enforces it (in
// evals and sessions), and a Runtime made with a budget counts from the
// start.
func TestFuelBudgetPicksMeteredCode(t *testing.T) {
	const code = "i = 0; while i < 100_000; i += 1; end; i"
	if res := eval(t, rt, code); res.FuelUsed != 0 {
		t.Fatalf("no budget: fuel used %d", res.FuelUsed)
	}
	// 100k iterations take about 5.1e7 fuel (see Limits.Fuel).
	view := withLimits(t, glovebox.Limits{Fuel: 100_000_000})
	if res := eval(t, view, code); res.Status != glovebox.StatusOK || res.FuelUsed == 0 {
		t.Fatalf("with a budget: %s, fuel used %d", res.Status, res.FuelUsed)
	}
	wantStatus(t, eval(t, view, "loop {}"), glovebox.StatusFuelExhausted)
	s, err := view.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	res, err := s.Eval(context.Background(), code)
	if err != nil || res.FuelUsed == 0 {
		t.Fatalf("session with a budget: %v, fuel used %d", err, res.FuelUsed)
	}
	r := newRuntime(t, glovebox.Config{Limits: glovebox.Limits{Fuel: 100_000_000}})
	if res := eval(t, r, code); res.FuelUsed == 0 {
		t.Fatal("a Runtime made with a budget counted no fuel")
	}
}

func TestMemoryLimit(t *testing.T) {
	for name, code := range map[string]string{
		"one huge string": `"x" * 400_000_000`,
		"growing array":   `a = []; loop { a << ("x" * 1_000_000) }`,
	} {
		t.Run(name, func(t *testing.T) {
			res := eval(t, rt, code)
			wantStatus(t, res, glovebox.StatusMemoryLimit)
		})
	}
}

func TestMemoryLimitBelowFloorRejected(t *testing.T) {
	_, err := rt.WithLimits(glovebox.Limits{Memory: 64 << 20})
	if !errors.Is(err, glovebox.ErrInvalidLimits) {
		t.Fatalf("err %v", err)
	}
	if _, err := rt.WithLimits(glovebox.Limits{Timeout: -1}); !errors.Is(err, glovebox.ErrInvalidLimits) {
		t.Fatalf("negative timeout: err %v", err)
	}
}

func TestCanceled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(200*time.Millisecond, cancel)
	res, err := rt.Eval(ctx, "loop {}")
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, res, glovebox.StatusCanceled)
	if !errors.Is(res.Err(), context.Canceled) {
		t.Fatalf("Err %v", res.Err())
	}
	// Cancelled while sleeping in a host call.
	ctx, cancel = context.WithCancel(context.Background())
	time.AfterFunc(200*time.Millisecond, cancel)
	res, _ = rt.Eval(ctx, "sleep 30")
	wantStatus(t, res, glovebox.StatusCanceled)
	// Already cancelled.
	res, _ = rt.Eval(ctx, "1")
	wantStatus(t, res, glovebox.StatusCanceled)
}

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

// At a limit the 4 GiB address space reaches first, running out of memory
// still ends as memory_limit; a NoMemoryError the guest raises itself
// while far from it stays an error.
func TestMemoryLimitAtAddressSpace(t *testing.T) {
	// A generous timeout: reserving 4.5 GiB of address space and growing
	// linear memory towards 4 GiB took over 10 s on a loaded 2-core host.
	r := withLimits(t, glovebox.Limits{Memory: 4 << 30, Timeout: time.Minute})
	// capacity: reserves address space without touching host pages.
	res := eval(t, r, `a = String.new(capacity: 1500 << 20); b = String.new(capacity: 1500 << 20); c = String.new(capacity: 1500 << 20); 1`)
	wantStatus(t, res, glovebox.StatusMemoryLimit)
	res = eval(t, r, `raise NoMemoryError, "mine"`)
	wantStatus(t, res, glovebox.StatusError)
}
