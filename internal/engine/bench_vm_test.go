package engine

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/gloveboxhq/glovebox/internal/wt"
	"golang.org/x/sys/unix"
)

// processFaults is the process's minor page faults so far.
func processFaults() int64 {
	var ru unix.Rusage
	unix.Getrusage(unix.RUSAGE_SELF, &ru)
	return ru.Minflt
}

// minorFaults is the calling thread's minor page faults so far.
func minorFaults() int64 {
	var ru unix.Rusage
	unix.Getrusage(unix.RUSAGE_THREAD, &ru)
	return ru.Minflt
}

// BenchmarkVMPhases times the phases of a fresh VM + 1+1 separately, with
// the page faults each takes: make (store, WASI, instance from the
// snapshot), prepare (reseed, tools), the eval, and freeing; and, as the
// floor, 1+1 again in the VM that already ran one. Its memory is reset
// from a freed VM's, as by default.
func BenchmarkVMPhases(b *testing.B) { benchVMPhases(b, 0) }

// BenchmarkVMPhasesFresh is BenchmarkVMPhases with each VM's memory
// mapped anew, as with DisableReuse: what a VM whose page residency
// tells nothing of earlier evals costs.
func BenchmarkVMPhasesFresh(b *testing.B) { benchVMPhases(b, wt.GroupFresh) }

func benchVMPhases(b *testing.B, group uint64) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	req := &Request{Code: "1+1", Limits: testLimits}
	const phases = 5
	names := [phases]string{"make", "prepare", "eval", "floor", "free"}
	var dt [phases]time.Duration
	var flt [phases]int64
	before := testEngine.MemoryStats()
	for b.Loop() {
		var t [phases + 1]time.Time
		var f [phases + 1]int64
		mark := func(i int) { t[i], f[i] = time.Now(), minorFaults() }
		mark(0)
		v, err := testEngine.newVM(testEngine.base, nil, nil, group)
		if err != nil {
			b.Fatal(err)
		}
		mark(1)
		if err := v.prepare(nil, false); err != nil {
			b.Fatal(err)
		}
		mark(2)
		if out := v.run(context.Background(), req); out.Status != StatusOK {
			b.Fatal(out)
		}
		mark(3)
		if out := v.run(context.Background(), req); out.Status != StatusOK {
			b.Fatal(out)
		}
		mark(4)
		v.close()
		mark(5)
		for i := range phases {
			dt[i] += t[i+1].Sub(t[i])
			flt[i] += f[i+1] - f[i]
		}
	}
	n := float64(b.N)
	for i, name := range names {
		b.ReportMetric(float64(dt[i].Nanoseconds())/1e3/n, name+"-µs")
		b.ReportMetric(float64(flt[i])/n, name+"-faults")
	}
	after := testEngine.MemoryStats()
	if r := after.Reused - before.Reused; r > 0 {
		b.ReportMetric(float64(after.Restored-before.Restored)/float64(r), "pages-restored/reuse")
	}
}

// BenchmarkWorkers reports fresh-VM evals per second with 1 and 2
// goroutines making their own VMs, alternating 300 ms rounds so drift in
// the machine's speed hits both alike.
func BenchmarkWorkers(b *testing.B) {
	for _, code := range []string{"1+1", midEval} {
		b.Run(map[string]string{"1+1": "1+1", midEval: "mid"}[code], func(b *testing.B) {
			req := &Request{Code: code, Limits: testLimits}
			rate := func(workers int) float64 {
				var n [2]int
				deadline := time.Now().Add(300 * time.Millisecond)
				done := make(chan struct{})
				for w := range workers {
					go func() {
						for time.Now().Before(deadline) {
							if out, err := testEngine.Eval(context.Background(), req); err != nil || out.Status != StatusOK {
								panic(fmt.Sprint(err, out))
							}
							n[w]++
						}
						done <- struct{}{}
					}()
				}
				for range workers {
					<-done
				}
				return float64(n[0]+n[1]) / 0.3
			}
			var r1, r2 float64
			before, f0, c0 := testEngine.MemoryStats(), processFaults(), 0.0
			for b.Loop() {
				r1 += rate(1)
				r2 += rate(2)
			}
			after, f1 := testEngine.MemoryStats(), processFaults()
			c0 = (r1 + r2) * 0.3 // evals run
			b.ReportMetric(r1/float64(b.N), "evals/s-1")
			b.ReportMetric(r2/float64(b.N), "evals/s-2")
			b.ReportMetric(r2/r1, "ratio")
			b.ReportMetric(float64(f1-f0)/c0, "faults/eval")
			b.ReportMetric(float64(after.Dropped-before.Dropped)/c0, "unmapped/eval")
			b.ReportMetric(float64(after.Made-before.Made)/c0, "mapped/eval")
			if r := after.Reused - before.Reused; r > 0 {
				b.ReportMetric(float64(after.Restored-before.Restored)/float64(r), "pages-restored/reuse")
			}
		})
	}
}

// midEval is the mid-size data eval of glovebox bench: builds, filters
// and summarises 500 records and returns a small hash.
const midEval = `rows = (1..500).map { |i| { "id" => i, "name" => "user#{i}", "score" => (i * 37) % 101, "tags" => ["a#{i % 7}", "b#{i % 11}"] } }
top = rows.select { |r| r["score"] > 50 }.sort_by { |r| -r["score"] }.first(20)
{ "n" => rows.size, "top" => top.map { |r| r["id"] }, "sum" => rows.sum { |r| r["score"] }, "json" => JSON.generate(top).size }`

// BenchmarkPoolGaps reports p50 and p99 of 1+1 with 10 ms between evals,
// from a pool of 2, from VMs made per eval, and in a session's VM that
// already ran one (the floor), alternating.
func BenchmarkPoolGaps(b *testing.B) {
	p, err := testEngine.NewPool(context.Background(), 2, nil, nil, "")
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	req := &Request{Code: "1+1", Limits: testLimits}
	var pooled, fresh, floor []time.Duration
	s, err := p.NewSession()
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	sess := func(ctx context.Context, r *Request) (*Outcome, error) {
		out, _, err := s.Eval(ctx, r)
		return out, err
	}
	timed := func(eval func(context.Context, *Request) (*Outcome, error)) time.Duration {
		time.Sleep(10 * time.Millisecond)
		t := time.Now()
		if out, err := eval(context.Background(), req); err != nil || out.Status != StatusOK {
			b.Fatal(err, out)
		}
		return time.Since(t)
	}
	for b.Loop() {
		pooled = append(pooled, timed(p.Eval))
		fresh = append(fresh, timed(testEngine.Eval))
		floor = append(floor, timed(sess))
	}
	reportLatency(b, "pool", pooled)
	reportLatency(b, "fresh", fresh)
	reportLatency(b, "floor", floor)
	h, m := p.Stats()
	b.ReportMetric(float64(h)/float64(h+m), "hit-rate")
}

// BenchmarkPoolBackToBack reports p50 and p99 of 1+1 back-to-back from a
// pool of 2 and from VMs made per eval, alternating rounds of 50, with
// the memories mapped afresh (not reused) per eval.
func BenchmarkPoolBackToBack(b *testing.B) {
	p, err := testEngine.NewPool(context.Background(), 2, nil, nil, "")
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	req := &Request{Code: "1+1", Limits: testLimits}
	var pooled, fresh []time.Duration
	before := testEngine.MemoryStats()
	for b.Loop() {
		for _, m := range []struct {
			eval func(context.Context, *Request) (*Outcome, error)
			d    *[]time.Duration
		}{{p.Eval, &pooled}, {testEngine.Eval, &fresh}} {
			for range 50 {
				t := time.Now()
				if out, err := m.eval(context.Background(), req); err != nil || out.Status != StatusOK {
					b.Fatal(err, out)
				}
				*m.d = append(*m.d, time.Since(t))
			}
		}
	}
	after := testEngine.MemoryStats()
	reportLatency(b, "pool", pooled)
	reportLatency(b, "fresh", fresh)
	b.ReportMetric(float64(after.Made-before.Made)/float64(len(pooled)+len(fresh)), "mapped/eval")
	h, m := p.Stats()
	b.ReportMetric(float64(h)/float64(h+m), "hit-rate")
}

// reportLatency reports the p50 and p99 of d in µs as name-p50-µs and
// name-p99-µs.
func reportLatency(b *testing.B, name string, d []time.Duration) {
	slices.Sort(d)
	q := func(f float64) float64 { return float64(d[int(f*float64(len(d)-1))].Nanoseconds()) / 1e3 }
	b.ReportMetric(q(0.5), name+"-p50-µs")
	b.ReportMetric(q(0.99), name+"-p99-µs")
}
