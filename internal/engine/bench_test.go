package engine

import (
	"context"
	"testing"

	"github.com/gloveboxhq/glovebox/internal/procmem"
)

// BenchmarkFreshVM and BenchmarkBootedVM compare a snapshot-restored VM
// with one that boots Ruby, each running 1+1.
func BenchmarkFreshVM(b *testing.B) {
	for b.Loop() {
		if out, err := testEngine.Eval(context.Background(), &Request{Code: "1+1", Limits: testLimits}); err != nil || out.Status != StatusOK {
			b.Fatal(err, out)
		}
	}
}

func BenchmarkBootedVM(b *testing.B) {
	for b.Loop() {
		if out, err := testEngine.EvalBooted(context.Background(), &Request{Code: "1+1", Limits: testLimits}); err != nil || out.Status != StatusOK {
			b.Fatal(err, out)
		}
	}
}

// BenchmarkLoopFuel compares the 1M-iteration loop metered by glovebox's
// rewrite (meter.go), unmetered, and metered by wasmtime's own fuel (the
// first run compiles the copies it lacks).
func BenchmarkLoopFuel(b *testing.B) {
	noFuel, err := Open(context.Background(), Config{ImagePath: testImage, CacheDir: testCacheDir, NoFuel: true})
	if err != nil {
		b.Fatal(err)
	}
	defer noFuel.Close()
	wasmtimeFuel, err := Open(context.Background(), Config{ImagePath: testImage, CacheDir: testCacheDir, WasmtimeFuel: true})
	if err != nil {
		b.Fatal(err)
	}
	defer wasmtimeFuel.Close()
	const loop = `t = Process.clock_gettime(Process::CLOCK_MONOTONIC); i = 0; while i < 1_000_000; i += 1; end; Process.clock_gettime(Process::CLOCK_MONOTONIC) - t`
	for _, c := range []struct {
		name string
		e    *Engine
	}{{"fuel", testEngine}, {"nofuel", noFuel}, {"wasmtimefuel", wasmtimeFuel}} {
		b.Run(c.name, func(b *testing.B) {
			var total float64
			for b.Loop() {
				out, err := c.e.Eval(context.Background(), &Request{Code: loop, Limits: testLimits})
				if err != nil || out.Status != StatusOK {
					b.Fatal(err, out)
				}
				total += out.Value.(float64)
			}
			b.ReportMetric(total/float64(b.N)*1e3, "ms/loop")
		})
	}
}

// BenchmarkIdleVM reports the private memory one prepared, idle VM holds.
func BenchmarkIdleVM(b *testing.B) {
	const n = 50
	for b.Loop() {
		before := procmem.Private()
		release, err := testEngine.HoldIdle(n)
		if err != nil {
			b.Fatal(err)
		}
		after := procmem.Private()
		release()
		b.ReportMetric(float64(after-before)/n, "bytes/VM")
	}
}
