package glovebox_test

import (
	"context"
	"sort"
	"testing"
	"time"

	"github.com/gloveboxhq/glovebox"
)

// heapCode writes n MiB of heap: a string of hex digits (4 bits of
// entropy a byte, so it compresses about 2:1), made from random bytes
// (another n/2 MiB, garbage once made).
func heapCode(n int) string {
	if n == 0 {
		return `x = 1`
	}
	return `$h = Random.new(1).bytes(` + itoa(int64(n)<<19) + `).unpack1("H*"); x = 1`
}

// benchRuntime is a Runtime with StateKeys and a small pool, as a server
// suspending sessions would run.
func benchRuntime(b testing.TB) *glovebox.Runtime {
	r, err := glovebox.New(context.Background(), glovebox.Config{StateKeys: testKeyring(b), PoolSize: 2, ScratchDir: ownScratch(b)})
	if err != nil {
		b.Fatal(err)
	}
	return r
}

// p50 reports the median of ds as the metric p50-µs.
func p50(b *testing.B, ds []time.Duration) {
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	if len(ds) > 0 {
		b.ReportMetric(float64(ds[len(ds)/2].Microseconds()), "p50-µs")
	}
}

// BenchmarkSuspend suspends an idle session that wrote 1 MiB of heap,
// and one that ran x = 1 (its state resumed again, untimed, before each).
func BenchmarkSuspend(b *testing.B) {
	ctx := context.Background()
	r := benchRuntime(b)
	defer r.Close()
	for _, mib := range []int{1, 0} {
		b.Run(heapName(mib), func(b *testing.B) {
			state := idleState(b, r, heapCode(mib))
			b.ReportMetric(float64(len(state)), "state-bytes")
			var ds []time.Duration
			for b.Loop() {
				b.StopTimer()
				s, err := r.ResumeSession(ctx, state)
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				start := time.Now()
				if state, err = s.Suspend(ctx); err != nil {
					b.Fatal(err)
				}
				ds = append(ds, time.Since(start))
			}
			p50(b, ds)
		})
	}
}

func heapName(mib int) string {
	if mib == 0 {
		return "x=1"
	}
	return itoa(int64(mib)) + "MiB"
}

// BenchmarkResume resumes those sessions and runs an eval in each,
// beside a new session's first eval (a VM prepared from the snapshot,
// from the pool when one waits).
func BenchmarkResume(b *testing.B) {
	ctx := context.Background()
	r := benchRuntime(b)
	defer r.Close()
	for _, mib := range []int{1, 0, -1} {
		name := "fresh"
		var state []byte
		if mib >= 0 {
			name = heapName(mib)
			state = idleState(b, r, heapCode(mib))
		}
		b.Run(name, func(b *testing.B) {
			var ds, evals []time.Duration
			for b.Loop() {
				start := time.Now()
				var s *glovebox.Session
				var err error
				if state == nil {
					s, err = r.NewSession()
				} else {
					s, err = r.ResumeSession(ctx, state)
				}
				if err != nil {
					b.Fatal(err)
				}
				ds = append(ds, time.Since(start))
				res, err := s.Eval(ctx, "defined?(x)")
				if err != nil || res.Status != glovebox.StatusOK {
					b.Fatal(err, res)
				}
				evals = append(evals, time.Since(start))
				b.StopTimer()
				s.Close()
				time.Sleep(2 * time.Millisecond) // the pool refills when quiet
				b.StartTimer()
			}
			p50(b, ds)
			sort.Slice(evals, func(i, j int) bool { return evals[i] < evals[j] })
			b.ReportMetric(float64(evals[len(evals)/2].Microseconds()), "p50-with-eval-µs")
		})
	}
}

// TestStateSizes reports the sealed size of idle sessions' states: x = 1
// must stay within 200 KB.
func TestStateSizes(t *testing.T) {
	r := benchRuntime(t)
	defer r.Close()
	for _, mib := range []int{0, 1, 10} {
		st := idleState(t, r, heapCode(mib))
		t.Logf("%-28s state %7.1f KiB", heapCode(mib)[:min(28, len(heapCode(mib)))], float64(len(st))/1024)
		if mib == 0 && len(st) > 200_000 {
			t.Fatalf("x = 1: %d bytes, over 200 KB", len(st))
		}
	}
}

// BenchmarkContinue continues an eval paused in its first tool call (a
// replay of the eval up to the call, then the rest of it), beside the
// same eval run straight.
func BenchmarkContinue(b *testing.B) {
	ctx := context.Background()
	const code = `rows = (1..200).map { |i| {id: i, name: "r#{i}"} }; a = double(rows.size); rows.sum { _1[:id] } + a`
	// Both Runtimes live through the whole benchmark: the last Runtime on
	// an engine to close frees it, and the next would start cold.
	rs := map[bool]*glovebox.Runtime{true: newCorpusRuntime(b, true, glovebox.Config{}), false: newCorpusRuntime(b, false, glovebox.Config{})}
	defer rs[true].Close()
	defer rs[false].Close()
	for _, suspend := range []bool{true, false} {
		name := "continue"
		if !suspend {
			name = "straight"
		}
		b.Run(name, func(b *testing.B) {
			r := rs[suspend]
			first := eval(b, r, code)
			var ds []time.Duration
			for b.Loop() {
				start := time.Now()
				var res *glovebox.Result
				var err error
				if suspend {
					res, err = r.Continue(ctx, first.State, glovebox.Answer{Value: 400})
				} else {
					res, err = r.Eval(ctx, code)
				}
				if err != nil || res.Status != glovebox.StatusOK {
					b.Fatal(err, res)
				}
				ds = append(ds, time.Since(start))
			}
			p50(b, ds)
		})
	}
}

// BenchmarkSessionEvalWithKeys is a session's eval with and without
// StateKeys: with them, each eval first captures the session's state (so
// that any of its calls can be suspended) and journals its inputs.
func BenchmarkSessionEvalWithKeys(b *testing.B) {
	ctx := context.Background()
	for _, keys := range []bool{false, true} {
		name := "without"
		cfg := glovebox.Config{PoolSize: 1}
		if keys {
			name, cfg.StateKeys = "with", testKeyring(b)
		}
		b.Run(name, func(b *testing.B) {
			r, err := glovebox.New(ctx, cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer r.Close()
			s, _ := r.NewSession()
			defer s.Close()
			s.Eval(ctx, heapCode(1))
			var ds []time.Duration
			for b.Loop() {
				start := time.Now()
				if res, err := s.Eval(ctx, "x += 1"); err != nil || res.Status != glovebox.StatusOK {
					b.Fatal(err, res)
				}
				ds = append(ds, time.Since(start))
			}
			p50(b, ds)
		})
	}
}
