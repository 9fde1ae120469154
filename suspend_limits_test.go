package glovebox_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gloveboxhq/glovebox"
)

// TestSuspendLimitsHold: a program near a limit before its pause has only
// what is left after it: suspended at every call and continued, it ends
// exactly as the straight run does (status, error class, output, calls,
// fuel) for the tool-call count, fuel, output and memory limits.
func TestSuspendLimitsHold(t *testing.T) {
	mib := func(n int64) int64 { return n << 20 }
	floor := rt.MemoryFloor()
	for _, c := range []struct {
		name   string
		limits glovebox.Limits
		code   string
		want   glovebox.Status
	}{
		{"tool calls", glovebox.Limits{Fuel: 1 << 40, ToolCalls: 3}, `5.times.map { double(_1) }`, glovebox.StatusToolBudgetExceeded},
		{"fuel", glovebox.Limits{Fuel: fuelBetween(t, `30_000.times { }; double(1); 60_000.times { }; :done`)}, `30_000.times { }; double(1); 60_000.times { }; :done`, glovebox.StatusFuelExhausted},
		{"stdout", glovebox.Limits{Fuel: 1 << 40, Stdout: 100}, `puts "a" * 70; double(1); puts "b" * 70; :done`, glovebox.StatusOK},
		{"memory", glovebox.Limits{Fuel: 1 << 40, Memory: floor + mib(96)}, `a = "x" * (80 << 20); double(1); b = "y" * (80 << 20); [a.size, b.size]`, glovebox.StatusMemoryLimit},
	} {
		t.Run(c.name, func(t *testing.T) {
			straight := newCorpusRuntime(t, false, glovebox.Config{Limits: c.limits})
			defer straight.Close()
			res := eval(t, straight, c.code)
			wantStatus(t, res, c.want)
			var sres *glovebox.Result
			ctx := context.Background()
			r := newCorpusRuntime(t, true, glovebox.Config{Limits: c.limits})
			defer r.Close()
			sres = eval(t, r, c.code)
			pauses := 0
			for sres.Status == glovebox.StatusSuspended {
				pauses++
				var err error
				if sres, err = r.Continue(ctx, sres.State, answerFor(sres.Pending)); err != nil {
					t.Fatal(err)
				}
			}
			if pauses == 0 {
				t.Fatal("never paused")
			}
			if got, want := comparable(t, sres), comparable(t, res); got != want {
				t.Fatalf("after %d pauses:\n%s\nstraight:\n%s", pauses, got, want)
			}
		})
	}
}

// fuelBetween returns a fuel budget that code (with one tool call) runs
// out of after its call: halfway between the fuel used at the call and
// the fuel the whole eval uses.
func fuelBetween(t *testing.T, code string) uint64 {
	r := newCorpusRuntime(t, true, glovebox.Config{})
	defer r.Close()
	res := eval(t, r, code)
	wantStatus(t, res, glovebox.StatusSuspended)
	at := res.FuelUsed
	res = mustContinue(t, r, res.State, answerFor(res.Pending))
	wantStatus(t, res, glovebox.StatusOK)
	return (at + res.FuelUsed) / 2
}

// TestSuspendWallClock: the wall-clock limit counts only time spent
// running: a pause longer than the limit does not use it up, the replay
// does not count (nor sleep again), and a program that runs past its
// limit across a pause times out.
func TestSuspendWallClock(t *testing.T) {
	lim := glovebox.Limits{Fuel: 1 << 40, Timeout: 1500 * time.Millisecond}
	r := newCorpusRuntime(t, true, glovebox.Config{Limits: lim})
	defer r.Close()
	res := eval(t, r, `sleep 0.6; double(1); sleep 0.6; :done`)
	wantStatus(t, res, glovebox.StatusSuspended)
	time.Sleep(1600 * time.Millisecond) // the pause is longer than the limit
	start := time.Now()
	res = mustContinue(t, r, res.State, glovebox.Answer{Value: 2})
	wantStatus(t, res, glovebox.StatusOK)
	if took := time.Since(start); took > 1200*time.Millisecond {
		t.Fatalf("the continued eval took %v: the replay slept again", took)
	}
	if res.Duration < 1200*time.Millisecond {
		t.Fatalf("Duration %v does not count the time run before the pause", res.Duration)
	}
	res = eval(t, r, `sleep 0.9; double(1); sleep 0.9; :done`)
	wantStatus(t, res, glovebox.StatusSuspended)
	res = mustContinue(t, r, res.State, glovebox.Answer{Value: 2})
	wantStatus(t, res, glovebox.StatusTimeout)
	if !strings.Contains(res.Error.Message, "wall-clock") {
		t.Fatalf("%+v", res.Error)
	}
}

// TestSuspendToolTime: tool time spent before a pause counts after it.
func TestSuspendToolTime(t *testing.T) {
	var ts glovebox.Toolset
	ts.Add("slow", func(context.Context, glovebox.Args) (any, error) {
		time.Sleep(400 * time.Millisecond)
		return nil, glovebox.SuspendCall("later")
	})
	r, err := glovebox.New(context.Background(), glovebox.Config{Tools: &ts, PoolSize: -1, StateKeys: testKeyring(t),
		Limits: glovebox.Limits{ToolTime: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	res := eval(t, r, `3.times.map { slow }`)
	for i := 0; res.Status == glovebox.StatusSuspended; i++ {
		res = mustContinue(t, r, res.State, glovebox.Answer{Value: i})
	}
	wantStatus(t, res, glovebox.StatusToolBudgetExceeded)
	if len(res.ToolCalls) != 3 || !strings.Contains(res.Error.Message, "tool-time budget") {
		t.Fatalf("%+v %+v", res.Error, res.ToolCalls)
	}
}

// TestSuspendManyPausesSmallTimeout: only running time counts against the
// wall-clock limit. A program that pauses 20 times, each pause continued
// in a new Runtime (as a new process would: the first trap in an engine
// used to cost tens of milliseconds of backtrace formatting, charged to
// the eval), ends ok under a 400 ms limit although its continuations took
// far longer than that in all; and its Duration counts what ran before
// the first pause, which no input preceded.
func TestSuspendManyPausesSmallTimeout(t *testing.T) {
	ctx := context.Background()
	cfg := glovebox.Config{Limits: glovebox.Limits{Fuel: 1 << 40, Timeout: 400 * time.Millisecond}}
	r := newCorpusRuntime(t, true, cfg)
	res := eval(t, r, `x = 0; 20_000.times { x += 1 }; [x, 20.times.map { |i| double(i) }.sum]`)
	r.Close()
	wantStatus(t, res, glovebox.StatusSuspended)
	before := res.Duration
	start := time.Now()
	pauses := 0
	for ; res.Status == glovebox.StatusSuspended; pauses++ {
		r := newCorpusRuntime(t, true, cfg)
		var err error
		res, err = r.Continue(ctx, res.State, answerFor(res.Pending))
		r.Close()
		if err != nil {
			t.Fatalf("pause %d: %v", pauses+1, err)
		}
		if res.Duration < before {
			t.Fatalf("pause %d: Duration %v, less than the %v run before it", pauses+1, res.Duration, before)
		}
	}
	if res.Status != glovebox.StatusOK || pauses != 20 {
		t.Fatalf("after %d pauses (%v of continuing): %s %+v", pauses, time.Since(start), res.Status, res.Error)
	}
	t.Logf("%d pauses: Duration %v, %v to continue them", pauses, res.Duration, time.Since(start))
}
