package glovebox_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/gloveboxhq/glovebox"
)

// Benchmarks for developers; `glovebox bench` prints the same figures with
// their in-run baselines. Compare runs with benchstat.

// BenchmarkEval is a fresh VM plus an eval of 1+1, from the snapshot.
func BenchmarkEval(b *testing.B) {
	for b.Loop() {
		res, err := rt.Eval(context.Background(), "1+1")
		if err != nil || res.Status != glovebox.StatusOK {
			b.Fatal(err, res)
		}
	}
}

// BenchmarkEvalParallel runs evals from GOMAXPROCS goroutines; compare its
// ns/op with BenchmarkEval's for the scaling (-cpu 1,2).
func BenchmarkEvalParallel(b *testing.B) {
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := rt.Eval(context.Background(), "1+1"); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkToolCall reports one tool-call round trip (ns/call) beside the
// same loop without calls, and the fuel one call costs (fuel/call: wasm
// instructions, from a run with a fuel budget less the bare loop's), which
// does not depend on the machine's load.
func BenchmarkToolCall(b *testing.B) {
	var ts glovebox.Toolset
	ts.Func("ping", func() int { return 1 })
	ts.Func("add", func(a, b int) int { return a + b })
	ts.Func("name", func(s string) string { return s })
	r, err := glovebox.New(context.Background(), glovebox.Config{Tools: &ts, Limits: glovebox.Limits{ToolCalls: 1 << 30}})
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	rf, err := glovebox.New(context.Background(), glovebox.Config{Tools: &ts, Limits: glovebox.Limits{ToolCalls: 1 << 30, Fuel: 1 << 40}})
	if err != nil {
		b.Fatal(err)
	}
	defer rf.Close()
	const calls = 1000
	fuel := func(code string) uint64 {
		res, err := rf.Eval(context.Background(), code)
		if err != nil || res.Status != glovebox.StatusOK {
			b.Fatal(err, res)
		}
		return res.FuelUsed
	}
	bare := fuel(fmt.Sprintf("i = 0; while i < %d; i += 1; end", calls))
	for _, c := range []struct{ name, body string }{{"calls", "ping; "}, {"add", "add(1, 2); "}, {"name", `name("abc"); `}, {"baseline", ""}} {
		b.Run(c.name, func(b *testing.B) {
			code := fmt.Sprintf("i = 0; while i < %d; %si += 1; end", calls, c.body)
			used := fuel(code)
			var total int64
			for b.Loop() {
				res, err := r.Eval(context.Background(), code)
				if err != nil || res.Status != glovebox.StatusOK {
					b.Fatal(err, res)
				}
				total += res.Duration.Nanoseconds()
			}
			b.ReportMetric(float64(total)/float64(b.N)/calls, "ns/iteration")
			b.ReportMetric(float64(int64(used-bare))/calls, "fuel/call") // signed: the baseline is about 0
		})
	}
}

// BenchmarkLoop is the 1M-iteration while loop, timed inside the guest.
func BenchmarkLoop(b *testing.B) {
	var total float64
	for b.Loop() {
		res, err := rt.Eval(context.Background(), `t = Process.clock_gettime(Process::CLOCK_MONOTONIC); i = 0; while i < 1_000_000; i += 1; end; Process.clock_gettime(Process::CLOCK_MONOTONIC) - t`)
		if err != nil || res.Status != glovebox.StatusOK {
			b.Fatal(err, res)
		}
		total += res.Value.(float64)
	}
	b.ReportMetric(total/float64(b.N)*1e3, "ms/loop")
}
